"""The number of series one agent exposes on a full MIG node stays within its budget, and the README says how many.

8 GPUs × 7 MIG instances, every instance attributed to a pod: the benchmark node of bench/bench_exporter.py. The
budget is the count when it was first measured (713), plus the plausibility gate's 11 per-node series (one
rejected-readings counter per check, the quarantined-device gauge), plus one processes-by-mode series per GPU
(8: every process here is a compute process; an MPS or graphics mode adds one per GPU it is on); a new metric that adds series per instance has
to make room or argue for a new budget here. (The snapshot carries no GPM PCIe or context-switch readings per
instance: a node whose driver answers them exposes up to four more series per GPU instance.)"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from watchdog.publishing import Exposition

ROOT = Path(__file__).resolve().parents[2]
SERIES_BUDGET = 732

sys.path.insert(0, str(ROOT / "bench"))
from bench_exporter import mig_node_snapshot  # noqa: E402  (bench/ is not a package)


def series(body: bytes) -> list[str]:
    return [line for line in body.decode().splitlines() if line and not line.startswith("#")]


def test_the_8_by_7_mig_node_stays_within_its_series_budget_and_the_readme_counts_them():
    snapshot = mig_node_snapshot(gpus=8)
    found = series(Exposition(lambda: snapshot).body(snapshot=snapshot, openmetrics=False, gzipped=False))
    names = {re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0) for line in found}
    assert len(found) <= SERIES_BUDGET
    readme = (ROOT / "README.md").read_text()
    assert f"exposes {len(found)} series per scrape under {len(names)} metric names" in readme, (
        "update the README's series count")
