"""The agent's whole per-tick cost on a dense MIG node: sample + attribute + detect + export, driver apart.

Issue target: ≤ 2 ms of the agent's own CPU per tick at 56 MIG instances (sample + export), ≤ 5 ms per scrape.
Every stage runs for real: the NVML backend against the simulated driver (its time measured by a proxy and
subtracted, since on a real node it is the driver's C code), the attribution join with a pod per instance and
/proc-free PIDs, the detector, and the exposition renderer (a scrape renders each snapshot once; later scrapes
of the same snapshot reuse the body). Times are wall-clock per tick on one thread, the least disturbed of
``--repeat`` runs (the machine is shared).

Run: ``.venv/bin/python bench/bench_tick.py [--ticks 200] [--repeat 3]``. A script, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_sampling import TimingProxy, dense_scenario  # noqa: E402

from watchdog.attribution.join import attribute  # noqa: E402
from watchdog.detection import Detector  # noqa: E402
from watchdog.model import DeviceAssignment, PodIndex, PodInfo, Snapshot  # noqa: E402
from watchdog.publishing import render  # noqa: E402
from watchdog.sampling import NvmlSampler  # noqa: E402
from watchdog.testbed import SimClock, SimulatedGpuNode  # noqa: E402


def run(gpus: int, ticks: int) -> dict[str, float]:
    clock = SimClock()
    node = SimulatedGpuNode.from_scenario(dense_scenario(gpus), clock)
    proxy = TimingProxy(node.nvml)
    sampler = NvmlSampler(proxy, node="bench", clock=clock)
    sampler.open()
    index = PodIndex.of(PodInfo(uid=p.uid, namespace=p.namespace, name=p.name, priority=p.priority)
                        for p in node.scenario.pods)  # the pod cache builds it once per change, not per tick
    detector = Detector()
    stages = {"sample": 0.0, "attribute": 0.0, "detect": 0.0, "export": 0.0}
    size = 0
    for tick in range(ticks + 5):
        if tick == 5:
            proxy.seconds = 0.0
            stages = dict.fromkeys(stages, 0.0)
        node.state()  # the simulation's own model for this tick, outside any measured stage
        assignments = [DeviceAssignment(device_id=row.device_id, resource=row.resource, namespace=row.namespace,
                                        pod=row.pod, container=row.container) for row in node.assignments()]
        proc = {p.pid: (p.pod_uid, None) for p in node.processes()}
        t0 = time.perf_counter()
        sample = sampler.sample(tick)
        t1 = time.perf_counter()
        attribution = attribute(sample, assignments=assignments, index=index, proc=proc, kubelet_ok=True, api_ok=True)
        t2 = time.perf_counter()
        findings = detector.step(sample, attribution)
        t3 = time.perf_counter()
        body = render(Snapshot(node="bench", sample=sample, attribution=attribution, findings=findings, ready=True))
        t4 = time.perf_counter()
        size = len(body)
        for name, seconds in zip(stages, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            stages[name] += seconds
        clock.advance(1.0)
    sampler.close()
    node.close()
    per_tick = {name: 1e3 * seconds / ticks for name, seconds in stages.items()}
    per_tick["driver"] = 1e3 * proxy.seconds / ticks
    per_tick["sample"] -= per_tick["driver"]
    per_tick["agent"] = sum(per_tick[name] for name in ("sample", "attribute", "detect", "export"))
    per_tick["size_kib"] = size / 1024
    per_tick["instances"] = sum(len(g.instances) for g in sample.gpus)
    return per_tick


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"{'instances':>9} {'sample':>7} {'attribute':>9} {'detect':>7} {'export':>7} {'agent':>7} "
          f"{'driver':>7} {'body KiB':>8}   (ms per tick; driver = simulated NVML, not agent)")
    for gpus in (8, 16):
        runs = [run(gpus, args.ticks) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: r["agent"])
        print(f"{best['instances']:>9.0f} {best['sample']:>7.2f} {best['attribute']:>9.2f} {best['detect']:>7.2f} "
              f"{best['export']:>7.2f} {best['agent']:>7.2f} {best['driver']:>7.2f} {best['size_kib']:>8.0f}"
              f"   (median agent {statistics.median(r['agent'] for r in runs):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
