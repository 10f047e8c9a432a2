"""Several simulated GPU nodes, each with its own agent and flight recorder, in one cluster: the fleet what-if's bed.

`gpu-watchdog whatif` asks every agent pod of the DaemonSet, so testing it for real needs a cluster with several
nodes whose agents listen. Each node here is a SimulatedWorld (its GPUs, kubelet, /proc and API server, which its
agent attributes against) running the production Agent with its flight recorder and what-if API on their own
loopback ports; the first node's API server is the cluster the command reads: it holds every node and every agent
pod, as the DaemonSet's pod on its node with podIP 127.0.0.1 and container ports ``metrics`` and ``whatif``. The
agents record ``ticks`` ticks as fast as they can tick (each cycle moves simulated time by one tick, without
waiting), then stop ticking and keep serving, so the recorders hold exactly those ticks while the fan-out runs.

The ways a node fails to answer are built in: ``down`` (a pod listed, nothing listening), ``slow`` (its agent
behind a proxy that holds each connection ``delay`` seconds) and ``empty`` (its recorder emptied after recording).
``python -m watchdog.testbed.fleet`` starts one and prints the commands to try (docs/flight-recorder.md).
"""

from __future__ import annotations

import asyncio
import copy
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from watchdog.config import read_yaml
from watchdog.kube.client import KubeApi
from watchdog.service.agent import Agent
from watchdog.testbed import DEMO_SCENARIO, load_scenario
from watchdog.testbed.clock import SimClock
from watchdog.testbed.world import NODE_ADDRESS, SimulatedWorld

KINDS = ("agent", "down", "slow", "empty")


@dataclass(frozen=True, slots=True)
class FleetNode:
    """One node of the bed: ``kind`` one of KINDS; ``scenario`` its GPUs and pods (the demo's by default, seeded
    per node so no two nodes see the same noise)."""

    name: str
    kind: str = "agent"
    scenario: str | Path | dict = DEMO_SCENARIO
    delay: float = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((NODE_ADDRESS, 0))
        return probe.getsockname()[1]


class _Running:
    """One node's world and agent, recording until its gate closes."""

    def __init__(self, spec: FleetNode, *, index: int, workdir: Path, token_file: Path, ticks: int,
                 worker: Any) -> None:
        data = copy.deepcopy(spec.scenario) if isinstance(spec.scenario, dict) else read_yaml(spec.scenario)
        data.update(node=spec.name, seed=int(data.get("seed") or 0) + index)
        load_scenario(data)  # a bad scenario fails here, named, before any node starts
        self.spec, self.ticks, self.done = spec, ticks, 0
        self.world = SimulatedWorld(data, workdir=workdir / spec.name, clock=SimClock(epoch=time.time()))
        self.flight = workdir / spec.name / "flight"
        self.whatif_port = free_port()
        self.token_file, self.worker = token_file, worker
        self.recorded = asyncio.Event()
        self.task: asyncio.Task | None = None
        self.kube: KubeApi | None = None

    async def start(self) -> int:
        """Start the world and the agent; returns the agent's metrics port."""
        await self.world.start()
        settings = self.world.settings(
            flight_recorder={"enabled": True, "directory": str(self.flight)},
            whatif={"token_file": str(self.token_file), "listen": NODE_ADDRESS, "port": self.whatif_port})
        self.kube = KubeApi.from_url(self.world.api.url).restrict_to_declared_permissions()
        interval = settings.sampling.interval_seconds

        async def sleep(seconds: float) -> None:  # at speed: no real wait; after ``ticks`` cycles, no more ticks
            self.done += 1
            if self.done >= self.ticks:
                self.recorded.set()
                await asyncio.Event().wait()
            await asyncio.sleep(0)
            self.world.advance(interval)

        agent = Agent(settings, nvml=self.world.nvml, clock=self.world.clock, sleep=sleep, kube=self.kube,
                      whatif_worker=self.worker)
        port = await agent.start()
        self.task = asyncio.create_task(agent.run(), name=f"agent-{self.spec.name}")
        return port

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        if self.kube is not None:
            await self.kube.close()
        await self.world.stop()


class DelayingProxy:
    """A TCP proxy that holds each connection ``delay`` seconds before passing it on: a node that answers slowly."""

    def __init__(self, upstream: int, *, delay: float) -> None:
        self.upstream, self.delay, self.port = upstream, delay, 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, NODE_ADDRESS, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            await asyncio.sleep(self.delay)
            up_reader, up_writer = await asyncio.open_connection(NODE_ADDRESS, self.upstream)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._tasks.discard(asyncio.current_task())  # type: ignore[arg-type]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    finally:
        writer.close()


class FleetBed:
    """``async with FleetBed([FleetNode("gpu-a"), FleetNode("gpu-d", kind="down")], workdir=…,
    whatif_worker=run_whatif) as bed``: then ``bed.kubeconfig``, ``bed.token_file`` and ``bed.flight(node)`` (a
    node's segments). ``whatif_worker`` is the agents' replay (watchdog.evaluation.whatif.run_whatif, injected as
    `gpu-watchdog run` injects it: the test bed sits below the evaluation)."""

    def __init__(self, nodes: list[FleetNode], *, workdir: str | Path, whatif_worker: Any, ticks: int = 180,
                 token: str = "fleet-whatif-token") -> None:
        if not any(node.kind != "down" for node in nodes):
            raise ValueError("a fleet bed needs one node with an agent: its API server is the cluster's")
        unknown = [node.name for node in nodes if node.kind not in KINDS]
        if unknown:
            raise ValueError(f"unknown node kind for {unknown}: one of {KINDS}")
        self.nodes, self.ticks, self.token, self.worker = nodes, ticks, token, whatif_worker
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.token_file = self.workdir / "whatif-token"
        self.token_file.write_text(token + "\n")
        self.kubeconfig = self.workdir / "kubeconfig"
        self._running: dict[str, _Running] = {}
        self._proxies: list[DelayingProxy] = []

    @property
    def api(self) -> Any:
        """The cluster's fake API server (the first node's)."""
        return next(iter(self._running.values())).world.api

    def flight(self, node: str) -> Path:
        return self._running[node].flight

    def whatif_port(self, node: str) -> int:
        return self._running[node].whatif_port

    async def start(self) -> str:
        """Start every node, wait until each agent has recorded its ticks; returns the cluster API server's URL."""
        ports: dict[str, tuple[int, int]] = {}
        for index, spec in enumerate(node for node in self.nodes if node.kind != "down"):
            running = _Running(spec, index=index, workdir=self.workdir, token_file=self.token_file,
                               ticks=self.ticks, worker=self.worker)
            self._running[spec.name] = running
            ports[spec.name] = (await running.start(), running.whatif_port)
        await asyncio.gather(*(running.recorded.wait() for running in self._running.values()))
        template: dict[str, Any] = {}
        for spec in self.nodes:
            if spec.kind == "down":
                continue
            running = self._running[spec.name]
            metrics, whatif = ports[spec.name]
            if spec.kind == "slow":
                proxy = DelayingProxy(whatif, delay=spec.delay)
                self._proxies.append(proxy)
                whatif = await proxy.start()
            if spec.kind == "empty":
                for segment in running.flight.iterdir():
                    segment.unlink()
            template = running.world.add_agent_pod(port=metrics, whatif_port=whatif)
            self._register(spec.name, template)
        for spec in self.nodes:
            if spec.kind == "down":  # listed as the DaemonSet's pod on a Ready node; nothing listens on its ports
                pod = copy.deepcopy(template)
                meta = pod["metadata"]
                meta["name"] = f"gpu-watchdog-{spec.name}"
                for key in ("uid", "resourceVersion", "creationTimestamp"):
                    meta.pop(key, None)
                pod["spec"]["nodeName"] = spec.name
                for port in pod["spec"]["containers"][0]["ports"]:
                    port["containerPort"] = free_port()
                self.api.add_node(spec.name, address=NODE_ADDRESS)
                self.api.add_pod(pod)
        self.api.write_kubeconfig(self.kubeconfig, name="gpu-watchdog-fleet")
        return self.api.url

    def _register(self, node: str, pod: dict[str, Any]) -> None:
        """A node's agent pod in the cluster's API server too (its own world's holds it already)."""
        cluster = self.api
        own = self._running[node].world.api
        if own is cluster:
            return
        cluster.add_node(node, address=NODE_ADDRESS)
        pod = copy.deepcopy(pod)
        pod["metadata"].pop("resourceVersion", None)
        cluster.add_pod(pod)

    async def stop(self) -> None:
        for proxy in self._proxies:
            await proxy.stop()
        for running in reversed(list(self._running.values())):
            await running.stop()

    async def __aenter__(self) -> FleetBed:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def serve_fleet(*, nodes: int, ticks: int, failing: bool, whatif_worker: Any, out: Any) -> None:
    """`gpu-watchdog demo --nodes N`: a bed of ``nodes`` agents (and, with ``failing``, one node of each failing
    kind), the commands to try printed to ``out``; runs until cancelled, in a ``gpu-watchdog-fleet-*`` temporary
    directory removed however it ends."""
    specs = [FleetNode(f"sim-node-{i + 1}") for i in range(nodes)]
    if failing:
        specs += [FleetNode("sim-node-down", kind="down"), FleetNode("sim-node-slow", kind="slow"),
                  FleetNode("sim-node-empty", kind="empty")]
    with tempfile.TemporaryDirectory(prefix="gpu-watchdog-fleet-") as workdir:
        print(f"recording {ticks} ticks on each of {nodes} simulated nodes …", file=out, flush=True)
        async with FleetBed(specs, workdir=workdir, ticks=ticks, whatif_worker=whatif_worker) as bed:
            print(f"\nA cluster of {len(specs)} GPU nodes at {bed.api.url}, each agent with {ticks} ticks in its "
                  f"flight recorder.\nTry, in another terminal (P: a policy file, e.g. the demo's with "
                  f"action.mode: enforce):\n\n"
                  f"  kubectl --kubeconfig {bed.kubeconfig} -n gpu-watchdog get pods -o wide\n"
                  f"  gpu-watchdog whatif --policy P --kubeconfig {bed.kubeconfig} --token-file {bed.token_file}\n"
                  f"  gpu-watchdog replay {bed.flight(specs[0].name)} --compare P   # one node by hand\n\n"
                  "Ctrl-C ends it.", file=out, flush=True)
            await asyncio.Event().wait()
