"""The agent's whole tick (sample + attribute + detect + export, driver apart), this tree against an earlier commit,
the two interleaved tick by tick in one process.

Why: ``bench/bench_tick.py``'s absolute figures move by 10–30 % between runs on a shared 2-core machine, more than a
"no slower than before" bound has to judge. Side by side, tick by tick (which goes first alternates), both see the
same machine at the same moment, so their ratio is steady where their absolute figures are not.

How: as ``bench/compare_detection.py``: the earlier commit's ``watchdog`` package is taken with ``git archive`` and
renamed ``watchdog_base``; each side builds its own simulated dense MIG node (8 H100 × 7 instances = 56) with its
own package and runs the stages ``bench_tick.py`` measures. The simulated driver's time is measured through a proxy
and taken out, as there. The first 20 ticks are left out (enumeration, GPM streams, caches).

Run: ``.venv/bin/python bench/compare_tick.py c7d96f4 [--ticks 400] [--rounds 3]``. A script, not a test.
"""

from __future__ import annotations

import argparse
import importlib
import io
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# Imports, attribute uses (``watchdog.__version__``) and resource package names (``"watchdog.trace"``); not the
# ``gpu-watchdog.io/…`` annotation keys.
_NAME = re.compile(r"(?<![-\w/])watchdog(?=[.\s])")
WARM_UP = 20


def _extract(commit: str, into: Path) -> None:
    archive = subprocess.run(["git", "archive", commit, "watchdog"], cwd=ROOT, check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    (into / "watchdog").rename(into / "watchdog_base")
    for path in (into / "watchdog_base").rglob("*.py"):
        path.write_text(_NAME.sub("watchdog_base", path.read_text()))


class Side:
    """One commit's agent stages over its own simulated node."""

    def __init__(self, package: str, gpus: int) -> None:
        from bench_sampling import TimingProxy, dense_scenario

        def load(name: str):
            return importlib.import_module(f"{package}.{name}")

        testbed, model = load("testbed"), load("model")
        self.model = model
        self.clock = testbed.SimClock()
        self.node = testbed.SimulatedGpuNode.from_scenario(dense_scenario(gpus), self.clock)
        self.proxy = TimingProxy(self.node.nvml)
        self.sampler = load("sampling").NvmlSampler(self.proxy, node="bench", clock=self.clock)
        self.sampler.open()
        self.attribute = load("attribution.join").attribute
        self.detector = load("detection").Detector()
        self.render = load("publishing").render
        self.index = model.PodIndex.of(model.PodInfo(uid=p.uid, namespace=p.namespace, name=p.name,
                                                     priority=p.priority) for p in self.node.scenario.pods)

    def tick(self, tick: int) -> float:
        """The agent's own seconds for one tick (the simulated driver's time taken out)."""
        model = self.model
        self.node.state()
        assignments = [model.DeviceAssignment(device_id=row.device_id, resource=row.resource,
                                              namespace=row.namespace, pod=row.pod, container=row.container)
                       for row in self.node.assignments()]
        proc = {p.pid: (p.pod_uid, None) for p in self.node.processes()}
        driver = self.proxy.seconds
        start = time.perf_counter()
        sample = self.sampler.sample(tick)
        attribution = self.attribute(sample, assignments=assignments, index=self.index, proc=proc, kubelet_ok=True,
                                     api_ok=True)
        findings = self.detector.step(sample, attribution)
        self.render(model.Snapshot(node="bench", sample=sample, attribution=attribution, findings=findings,
                                   ready=True))
        seconds = time.perf_counter() - start - (self.proxy.seconds - driver)
        self.clock.advance(1.0)
        return seconds


def _round(ticks: int, gpus: int) -> tuple[np.ndarray, np.ndarray]:
    sides = [Side("watchdog_base", gpus), Side("watchdog", gpus)]
    times: list[list[float]] = [[], []]
    for tick in range(ticks):
        for side in ((0, 1) if tick % 2 else (1, 0)):
            times[side].append(sides[side].tick(tick))
    return np.array(times[0][WARM_UP:]) * 1e3, np.array(times[1][WARM_UP:]) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commit", help="the earlier commit, e.g. c7d96f4")
    parser.add_argument("--ticks", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gpus", type=int, default=8, help="H100s of 7 MIG instances each (8: 56 instances)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        _extract(args.commit, Path(tmp))
        sys.path[:0] = [tmp, str(ROOT / "bench"), str(ROOT)]
        print(f"agent per tick at {args.gpus * 7} MIG instances, {args.commit} (before) and this tree (after), "
              "interleaved; ms")
        for number in range(1, args.rounds + 1):
            before, after = _round(args.ticks, args.gpus)
            print(f"round {number}: before mean={before.mean():.3f} median={np.median(before):.3f} | "
                  f"after mean={after.mean():.3f} median={np.median(after):.3f} | "
                  f"after/before mean={after.mean() / before.mean():.2f} median={np.median(after) / np.median(before):.2f}")


if __name__ == "__main__":
    main()
