"""A slow API server delays evictions, never the tick: sampling, detection and /metrics keep their cadence, and no
eviction goes out on a finding older than ``max_decision_age_seconds``.

The API server's delay runs on the simulated clock, which moves only between ticks; an agent whose tick waited on
the API server would never see its request answered (the test's bounded wait then fails), so the test needs no
wall-clock assertion: it counts ticks and reads their timestamps on the simulated clock.
"""

from __future__ import annotations

import asyncio

from tests.service.conftest import SCENARIOS
from watchdog.kube.client import KubeApi
from watchdog.service.agent import Agent
from watchdog.testbed.world import SimulatedWorld

API_DELAY = 10.0  # simulated seconds per request
TICKS = 260


class TickTimes:
    stage = "test-ticks"

    def __init__(self) -> None:
        self.timestamps: list[float] = []
        self.stale = 0

    def tick_done(self, result) -> None:
        if result.sample is not None:
            self.timestamps.append(result.sample.timestamp)
        self.stale += sum(1 for record in result.actions.counted if record.result.value == "stale")


async def run_with_slow_api(tmp_path, *, max_age: float):
    world = SimulatedWorld(SCENARIOS / "interference-timeslice-a100.yaml", workdir=tmp_path / "world")
    await world.start()
    kube = KubeApi.from_url(world.api.url)
    try:
        settings = world.settings(sampling={"events": False},
                                  policy={"action": {"mode": "enforce", "max_decision_age_seconds": max_age}})
        interval = settings.sampling.interval_seconds
        ticks = TickTimes()

        async def world_sleep(seconds: float) -> None:
            await asyncio.sleep(0.002)  # the agent's other tasks (watches, the sender) get the loop
            world.advance(interval)

        agent = Agent(settings, nvml=world.nvml, clock=world.clock, sleep=world_sleep, kube=kube, sinks=[ticks])
        await agent.start()
        ages: list[float] = []

        def on_request(method: str, path: str) -> None:
            if method == "POST" and path.endswith("/eviction"):
                ages.extend(world.clock() - queued.decided_at for queued in agent.action.in_flight)

        world.api.on_request = on_request
        world.api.delay(API_DELAY, clock=world.clock)
        await asyncio.wait_for(agent.run(ticks=TICKS), timeout=240)
        return agent, ticks, ages, interval
    finally:
        world.api.delay(0)
        await kube.close()
        await world.stop()


def assert_cadence(ticks: TickTimes, interval: float) -> None:
    assert len(ticks.timestamps) == TICKS  # every tick ran, none waited for the API server
    gaps = [b - a for a, b in zip(ticks.timestamps, ticks.timestamps[1:])]
    assert all(abs(gap - interval) <= 0.1 * interval for gap in gaps), max(gaps)


async def test_ticks_keep_their_cadence_and_sends_are_fresh_under_a_slow_api_server(tmp_path):
    agent, ticks, ages, interval = await run_with_slow_api(tmp_path, max_age=60.0)
    assert_cadence(ticks, interval)
    # The starving pod was sent for (dry-run or enforce alike: a POST reached the API server) ...
    assert ages, "no eviction was sent"
    # ... and every send went out within the decision age of the tick its finding was judged on.
    assert all(age <= 60.0 for age in ages), ages


async def test_a_send_delayed_past_the_decision_age_is_dropped_as_stale(tmp_path):
    agent, ticks, ages, interval = await run_with_slow_api(tmp_path, max_age=5.0)
    assert_cadence(ticks, interval)
    # Each request takes 10 s: the kill-switch re-read and the pod re-read alone age the decision past 5 s.
    assert ages == []
    assert ticks.stale >= 1
    assert any(result == "stale" for (result, _reason, _ns) in agent.action.counts)
