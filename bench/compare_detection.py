"""Detection per tick, this tree against an earlier commit, the two interleaved tick by tick in one process.

Why: on a shared 2-core machine two bench runs a minute apart differ by 10–30 %, more than most changes a
"not slower than before" bound has to judge. Run side by side, tick by tick (which one goes first alternates),
both see the same machine at the same moment, so their ratio is steady where their absolute figures are not.

How: the earlier commit's ``watchdog`` package and ``bench/bench_detection.py`` are taken with ``git archive``
into a temporary directory, the package renamed ``watchdog_base`` (its imports rewritten), and both benches
build their own samples (each as its own commit's model spells them) from the same seed. The figures are
wall-clock per ``Detector.step``; the first 50 ticks are left out (warm-up).

``--same-bench`` drives the earlier package with this tree's bench instead of the commit's own, so both judge the
same node when the bench itself grew (it must then build its samples with fields both models have).

Run: ``.venv/bin/python bench/compare_detection.py 927283a [--ticks 2000] [--rounds 3] [--same-bench]``. A script,
not a test.
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
_IMPORT = re.compile(r"\b(from|import) watchdog(?=[.\s])")


def _extract(commit: str, into: Path, *, same_bench: bool = False) -> None:
    """The commit's package as ``watchdog_base`` and its bench (or this tree's) as ``bench_base.py``, under ``into``."""
    archive = subprocess.run(["git", "archive", commit, "watchdog", "bench/bench_detection.py"], cwd=ROOT,
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    (into / "watchdog").rename(into / "watchdog_base")
    if same_bench:
        (into / "bench" / "bench_detection.py").write_text((ROOT / "bench" / "bench_detection.py").read_text())
    for path in [*(into / "watchdog_base").rglob("*.py"), into / "bench" / "bench_detection.py"]:
        path.write_text(_IMPORT.sub(r"\1 watchdog_base", path.read_text()))
    (into / "bench" / "bench_detection.py").rename(into / "bench_base.py")


def _setup(bench, ticks: int):
    pods, devices, processes = bench.build_pods()
    attribution = bench.Attribution(devices=devices, processes=processes, index=bench.PodIndex(pods))
    policy = bench.DetectionPolicy.model_validate(
        {"quota": {"tenants": {"tenant-1": {"gpu_memory_bytes": 40 * bench.GIB}}}}
    )
    rng = np.random.default_rng(1)
    return bench.Detector(policy), attribution, [bench.build_sample(t, rng) for t in range(ticks)]


def _round(base, now, ticks: int) -> tuple[np.ndarray, np.ndarray]:
    sides = [_setup(base, ticks), _setup(now, ticks)]
    times: list[list[float]] = [[], []]
    for tick in range(ticks):
        for side in ((0, 1) if tick % 2 else (1, 0)):
            detector, attribution, samples = sides[side]
            start = time.perf_counter()
            detector.step(samples[tick], attribution)
            times[side].append(time.perf_counter() - start)
    return np.array(times[0][50:]) * 1e3, np.array(times[1][50:]) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commit", help="the earlier commit, e.g. 927283a")
    parser.add_argument("--ticks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--same-bench", action="store_true", help="drive both packages with this tree's bench")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        _extract(args.commit, Path(tmp), same_bench=args.same_bench)
        sys.path[:0] = [tmp, str(ROOT / "bench"), str(ROOT)]
        base = importlib.import_module("bench_base")
        now = importlib.import_module("bench_detection")
        print(f"detection per tick, {args.commit} (before) and this tree (after), interleaved; ms")
        for number in range(1, args.rounds + 1):
            before, after = _round(base, now, args.ticks)
            print(f"round {number}: before mean={before.mean():.3f} median={np.median(before):.3f} | "
                  f"after mean={after.mean():.3f} median={np.median(after):.3f} | "
                  f"after/before mean={after.mean() / before.mean():.2f} median={np.median(after) / np.median(before):.2f}")


if __name__ == "__main__":
    main()
