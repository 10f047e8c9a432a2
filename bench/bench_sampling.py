"""How much CPU one sampling tick costs the agent, with the simulated driver's own time taken out.

The target is ≤ 2 ms of agent CPU per tick at 56 MIG instances (sample + export; export is measured apart), so
this script builds dense MIG nodes from a scenario dict, runs ~200 ticks while advancing the simulated clock,
and wraps every nvml* function in a timing proxy: what the simulation spends computing answers is the driver's
time on a real node (a C call), not the agent's, and is subtracted. Process CPU (time.process_time) is shown
for context, but the subtraction uses one clock (perf_counter) on both sides: mixing a CPU clock with a wall
clock goes negative on a busy machine. The proxy's own bookkeeping (two perf_counter reads, ~0.1 µs per call)
lands on the driver side; the calls/tick column says how much that can be.

Run: ``.venv/bin/python bench/bench_sampling.py [--ticks 200]``. A script, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from watchdog.sampling import NvmlSampler  # noqa: E402
from watchdog.testbed import SimClock, SimulatedGpuNode  # noqa: E402


class TimingProxy:
    """Stands in for the nvml module: forwards everything, timing each nvml* call."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._wrapped: dict[str, Callable[..., Any]] = {}
        self.seconds = 0.0
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        wrapped = self._wrapped.get(name)
        if wrapped is not None:
            return wrapped
        target = getattr(self._nvml, name)
        if not (name.startswith("nvml") and callable(target)) or isinstance(target, type):
            return target
        clock = time.perf_counter

        def timed(*args: Any) -> Any:
            started = clock()
            try:
                return target(*args)
            finally:
                self.seconds += clock() - started
                self.calls += 1

        self._wrapped[name] = timed
        return timed


def dense_scenario(gpus: int, *, profile: str = "1g.10gb", per_gpu: int = 7) -> dict:
    pods = []
    for gpu in range(gpus):
        for instance in range(per_gpu):
            pods.append({
                "namespace": f"team-{instance % 4}",
                "name": f"job-{gpu}-{instance}",
                "device": {"gpu": gpu, "instance": instance},
                "workload": {"memory": {"base": "6Gi", "noise": "100Mi"}, "sm": {"base": 0.6, "noise": 0.05},
                             "dram": {"base": 0.4, "noise": 0.05}},
            })
    gpu = {"model": "H100-80GB-HBM3", "mig": [profile] * per_gpu}
    return {"name": f"bench-{gpus}x{per_gpu}", "gpus": [gpu] * gpus, "pods": pods}


def measure(gpus: int, ticks: int) -> dict[str, float]:
    clock = SimClock()
    node = SimulatedGpuNode.from_scenario(dense_scenario(gpus), clock)
    proxy = TimingProxy(node.nvml)
    sampler = NvmlSampler(proxy, node="bench", clock=clock)
    sampler.open()
    for tick in range(5):  # warm-up: enumeration, GPM streams, caches
        sampler.sample(tick)
        clock.advance(1.0)
    proxy.seconds, proxy.calls = 0.0, 0
    wall = cpu = 0.0
    instances = 0
    for tick in range(5, 5 + ticks):
        node.state()  # the simulation's per-tick model, computed up front: not part of any NVML call's cost
        wall_start, cpu_start = time.perf_counter(), time.process_time()
        sample = sampler.sample(tick)
        cpu += time.process_time() - cpu_start
        wall += time.perf_counter() - wall_start
        clock.advance(1.0)
        instances = sum(len(gpu.instances) for gpu in sample.gpus)
    sampler.close()
    node.close()
    errors = sampler.error_counts()
    return {
        "gpus": gpus,
        "instances": instances,
        "calls": proxy.calls / ticks,
        "wall_ms": 1e3 * wall / ticks,
        "cpu_ms": 1e3 * cpu / ticks,
        "driver_ms": 1e3 * proxy.seconds / ticks,
        # Both sides on the same (wall) clock: for one thread, wall time outside NVML bounds its CPU time from
        # above, and the least disturbed repeat is taken because the machine is shared with other work.
        "agent_ms": 1e3 * (wall - proxy.seconds) / ticks,
        "errors": sum(errors.values()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3, help="runs per size; the least disturbed one is shown")
    args = parser.parse_args(argv)
    columns = ("GPUs", "MIG", "calls/tick", "wall ms", "cpu ms", "driver ms", "agent ms", "errors")
    widths = [max(6, len(column)) for column in columns]
    print(" ".join(column.rjust(width) for column, width in zip(columns, widths)))
    print(" ".join("-" * width for width in widths))
    for gpus in (8, 16):
        # The machine is shared: the least disturbed run is the closest to the sampler's own cost.
        row = min((measure(gpus, args.ticks) for _ in range(args.repeat)), key=lambda r: r["agent_ms"])
        cells = (f"{row['gpus']}", f"{row['instances']}", f"{row['calls']:.0f}", f"{row['wall_ms']:.3f}",
                 f"{row['cpu_ms']:.3f}", f"{row['driver_ms']:.3f}", f"{row['agent_ms']:.3f}", f"{row['errors']}")
        print(" ".join(cell.rjust(width) for cell, width in zip(cells, widths)))
    print("agent ms = wall time of sample() minus time inside the (simulated) NVML calls, per tick;")
    print("target: sample + export <= 2 ms of agent CPU per tick at 56 MIG instances.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
