"""Drives the production Agent against a SimulatedWorld, tick by tick, without sleeping through ticks.

Simulated time moves only when the driver says so; the agent's long-lived helpers (kubelet refresher, pod
watcher) run as real tasks against the real fake servers, and the driver waits (bounded polling) for them to
have caught up where a test needs it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.waiting import poll
from watchdog.kube.client import KubeApi
from watchdog.service.agent import Agent
from watchdog.testbed.world import SimulatedWorld

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"


class Driver:
    def __init__(self, world: SimulatedWorld, agent: Agent, kube: KubeApi) -> None:
        self.world = world
        self.agent = agent
        self.kube = kube
        self.tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        await self.agent.start()
        self.tasks.append(asyncio.create_task(self.agent.kubelet.refresher(self.world.clock, poll_seconds=0.01)))
        if self.agent.pod_watcher is not None:
            self.tasks.append(asyncio.create_task(self.agent.pod_watcher.run()))
        if self.agent.slice_watcher is not None:
            self.tasks.append(asyncio.create_task(self.agent.slice_watcher.run()))
        await self.agent.kill_switch.refresh()  # the agent's kill-switch watcher reads it first thing
        # What the agent's slow GPU-sharing readers do first thing: count the kubelet's replicas, read the Node's labels.
        await self.agent.replicas.refresh(self.world.clock())
        if self.agent.node_labels is not None:
            await self.agent.node_labels.read()
        await self.caught_up()

    async def caught_up(self) -> None:
        """The pod cache and the kubelet view reflect the world as it is now."""
        api_pods = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in self.world.api.objects("pods")}
        await poll(lambda: self.agent.pod_watcher.ok and {(p.namespace, p.name) for p in
                   self.agent.pods.index().pods.values()} == api_pods, what="pod cache")
        if self.agent.slice_watcher is not None:
            api_slices = {o["metadata"]["name"]: o["spec"]["pool"]["generation"]
                          for o in self.world.api.objects("resourceslices")}
            await poll(lambda: self.agent.slice_watcher.ok and self.agent.slices.generations() == api_slices,
                       what="resourceslice cache")
        calls = self.agent.kubelet.list_calls
        self.agent.kubelet.request_refresh()
        await poll(lambda: self.agent.kubelet.list_calls > calls and self.agent.kubelet.ok, what="a kubelet List")

    async def ticks(self, n: int, *, sync: bool = False) -> Any:
        snapshot = None
        for _ in range(n):
            snapshot = (await self.agent.cycle_once()).snapshot
            self.world.advance(self.world.scenario.tick_seconds)
            if sync:
                await self.caught_up()
            else:
                await asyncio.sleep(0)
        return snapshot

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.agent.stop()
        await self.kube.close()


@pytest.fixture
async def drive(tmp_path):
    """``driver = await drive(scenario, **settings_flags)`` — stopped and cleaned up after the test."""
    started: list[tuple[SimulatedWorld, Driver]] = []

    async def make(scenario: Any, *, events: bool = True, **flags: Any) -> Driver:
        world = SimulatedWorld(scenario, workdir=tmp_path / f"world{len(started)}")
        await world.start()
        flags.setdefault("sampling", {}).setdefault("event_wait_ms", 20)
        flags["sampling"]["events"] = events
        settings = world.settings(**flags)
        kube = KubeApi.from_url(world.api.url)
        agent = Agent(settings, nvml=world.nvml, clock=world.clock, kube=kube)
        driver = Driver(world, agent, kube)
        started.append((world, driver))
        await driver.start()
        return driver

    yield make
    for world, driver in reversed(started):
        await driver.stop()
        await world.stop()
