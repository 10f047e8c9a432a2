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
from watchdog.service.whatif_jobs import WhatIfWorker
from watchdog.testbed import DEMO_SCENARIO
from watchdog.testbed.clock import SimClock
from watchdog.testbed.world import SimulatedWorld

log = logging.getLogger(__name__)

DEFAULT_SCENARIO = DEMO_SCENARIO
"""The built-in demo scenario (scenarios/demo.yaml, or its installed copy)."""


Banner = Callable[[SimulatedWorld, int, Path], str]
"""What to tell the person once the agent listens: given the world, the agent's port and the kubeconfig written for
the world's API server, the text to print (or to put above a screen)."""


async def run_simulated(
    scenario: str | Path,
    *,
    port: int = 9435,
    config: str | None = None,
    flags: dict[str, Any] | None = None,
    screen: Callable[[Agent, str], Awaitable[None]] | None = None,
    banner: Banner | None = None,
    speed: float = 1.0,
    ticks: int | None = None,
    sinks: Sequence[TickSink] = (),
    out: Any = None,
    ready: Callable[[Agent, SimulatedWorld], None] | None = None,
    whatif_worker: WhatIfWorker | None = None,
) -> None:
    """Build the world and the agent, run until cancelled (or ``ticks`` cycles).

    The world lives in a ``gpu-watchdog-sim-*`` temporary directory (the kubelet's socket, the /proc tree, the
    kubeconfig), removed however the run ends: its last tick, an error, or a cancellation (Ctrl-C and SIGTERM
    cancel the run in cli._run_async, and the cancellation unwinds through here). Once the agent listens, its pod
    joins the world's API server (``SimulatedWorld.add_agent_pod``) and ``banner`` says what to try: printed to
    ``out``, or handed to ``screen`` (the demo's live table), which runs beside the agent. No banner, no words:
    `record` prints none, since its cluster is gone when it ends. ``whatif_worker``: the agent's what-if replay
    (Agent's parameter of that name).
    """
    out = out or sys.stdout
    with tempfile.TemporaryDirectory(prefix="gpu-watchdog-sim-") as workdir:
        async with SimulatedWorld(scenario, workdir=workdir, deletion_delay=min(3.0, 3.0 / speed),
                                  clock=SimClock(epoch=time.time())) as world:
            await _run_agent(world, port=port, config=config, flags=flags, screen=screen, banner=banner,
                             speed=speed, ticks=ticks, sinks=sinks, out=out, ready=ready,
                             whatif_worker=whatif_worker)


async def _run_agent(world: SimulatedWorld, *, port: int, config: str | None, flags: dict[str, Any] | None,
                     screen: Callable[[Agent, str], Awaitable[None]] | None, banner: Banner | None, speed: float,
                     ticks: int | None, sinks: Sequence[TickSink], out: Any,
                     ready: Callable[[Agent, SimulatedWorld], None] | None,
                     whatif_worker: WhatIfWorker | None = None) -> None:
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

    agent = Agent(settings, nvml=world.nvml, clock=world.clock, sleep=world_sleep, kube=kube, sinks=sinks,
                  whatif_worker=whatif_worker)
    try:
        port_bound = await agent.start()
        log.info("simulated node %s: metrics at http://127.0.0.1:%d/metrics", world.scenario.node, port_bound)
        world.add_agent_pod(port=port_bound)
        kubeconfig = world.api.write_kubeconfig(world.workdir / "kubeconfig", name="gpu-watchdog-demo")
        text = banner(world, port_bound, kubeconfig) if banner is not None else ""
        if screen is None and text:
            print(text, end="", file=out, flush=True)
        if ready is not None:
            ready(agent, world)
        drawing = asyncio.create_task(screen(agent, text)) if screen is not None else None
        try:
            await agent.run(ticks=ticks)
        finally:
            if drawing is not None:
                drawing.cancel()
    finally:
        await kube.close()
