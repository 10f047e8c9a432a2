"""Tick spacing of an agent while its what-if API replays the flight recorder (issue 24: the tick loop must not
feel the replay).

The production Agent runs on the simulated demo node, its flight recorder on and the what-if API on a loopback
port. It first ticks ``--prefill`` times without waiting (so its recorder holds a long run to replay), then in
real time at ``--interval``: ``--baseline`` ticks alone, then a what-if is POSTed and every tick is timed until the
what-if ends. Printed:
the spacing of consecutive ticks (mean, p50, p99, max, in ms and against the interval) before and during the
what-if, the worker's CPU seconds and its ticks replayed. The worker runs niced to 19 in SCHED_IDLE: on an idle
machine both columns should read the interval; on a loaded one the what-if only takes the idle CPU.

Run: ``.venv/bin/python bench/bench_whatif.py [--interval 0.5] [--prefill 4000] [--baseline 20]``. A script, not a
test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from watchdog.evaluation.whatif import run_whatif  # noqa: E402
from watchdog.kube.client import KubeApi  # noqa: E402
from watchdog.model import TickResult  # noqa: E402
from watchdog.service.agent import Agent  # noqa: E402
from watchdog.testbed import DEMO_SCENARIO  # noqa: E402
from watchdog.testbed.clock import SimClock  # noqa: E402
from watchdog.testbed.world import SimulatedWorld  # noqa: E402

TOKEN = "bench"


class TickTimes:
    """A TickSink noting when each tick was done (monotonic seconds)."""

    stage = "bench"

    def __init__(self) -> None:
        self.times: list[float] = []

    def tick_done(self, result: TickResult) -> None:
        self.times.append(time.monotonic())


def spacing(times: list[float]) -> list[float]:
    return [later - earlier for earlier, later in zip(times, times[1:])]


def describe(name: str, gaps: list[float], interval: float) -> str:
    if not gaps:
        return f"{name:>14}: no ticks"
    ordered = sorted(gaps)
    p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
    cells = [f"{label} {value * 1000:7.1f} ms ({value / interval:4.2f}×)"
             for label, value in (("mean", statistics.fmean(gaps)), ("p50", statistics.median(gaps)),
                                  ("p99", p99), ("max", ordered[-1]))]
    return f"{name:>14}: {len(gaps):4d} gaps  " + "  ".join(cells)


async def bench(args: argparse.Namespace, workdir: Path) -> None:
    flight, token = workdir / "flight", workdir / "token"
    token.write_text(TOKEN)
    times = TickTimes()
    flags = {"sampling": {"interval_seconds": args.interval, "events": False},
             "flight_recorder": {"enabled": True, "directory": str(flight)},
             "whatif": {"token_file": str(token), "listen": "127.0.0.1", "port": 0}}
    async with SimulatedWorld(DEMO_SCENARIO, workdir=workdir / "world", clock=SimClock(epoch=time.time())) as world:
        settings = world.settings(**flags)
        kube = KubeApi.from_url(world.api.url)
        prefilling = True

        async def sleep(seconds: float) -> None:  # as the runner's, but no wait at all while prefilling
            await asyncio.sleep(0 if prefilling else seconds)
            world.advance(settings.sampling.interval_seconds)

        agent = Agent(settings, nvml=world.nvml, clock=world.clock, sleep=sleep, kube=kube, sinks=(times,),
                      whatif_worker=run_whatif)
        run = asyncio.create_task(agent.run())
        try:
            while len(times.times) < args.prefill:
                await asyncio.sleep(0.05)
            prefilling = False
            start = len(times.times) + 1  # the first tick after a real interval
            while len(times.times) < start + args.baseline + 1:
                await asyncio.sleep(args.interval / 4)
            status, first, last = await whatif(agent.whatif_port, args.interval, times)
        finally:
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
            await kube.close()
    print(f"interval {args.interval:g} s, {args.prefill} ticks recorded by the agent first; what-if "
          f"{status['state']} after {status['progress']['ticks_done']} ticks replayed under both policies, "
          f"{status['cpu_seconds']:.1f} worker CPU seconds, {status['segments']} segments"
          + (f" ({status['error']})" if status["error"] else ""))
    print(describe("before", spacing(times.times[start:first]), args.interval))
    print(describe("during what-if", spacing(times.times[first - 1:last]), args.interval))


async def whatif(port: int, interval: float, times: TickTimes) -> tuple[dict, int, int]:
    """POST a what-if and poll it until it ends: its last status, and the ticks done when it began and ended."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    base = f"http://127.0.0.1:{port}/api/v1/whatif"
    marks: list[int] = []
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.post(base, json={"policy": {"action": {"mode": "observe"}}}) as response:
            started = await response.json()
            assert response.status == 202, started
        marks.append(len(times.times))
        while True:
            await asyncio.sleep(interval / 2)
            async with session.get(f"{base}/{started['id']}") as response:
                status = await response.json()
            if status["state"] != "running":
                break
        marks.append(len(times.times))
    return status, marks[0], marks[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=0.5, help="the agent's tick interval in seconds")
    parser.add_argument("--prefill", type=int, default=4000, help="ticks in the recorder before the agent starts")
    parser.add_argument("--baseline", type=int, default=20, help="ticks timed before the what-if starts")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the demo's findings and the open segment's torn end are expected
    with tempfile.TemporaryDirectory(prefix="gpu-watchdog-bench-whatif-") as workdir:
        asyncio.run(bench(args, Path(workdir)))


if __name__ == "__main__":
    main()
