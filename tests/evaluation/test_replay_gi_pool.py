"""Replaying a hand-written trace (docs/trace-format.md) of one GPU instance split into two compute instances held
by two tenants: each CI handle reports the GI's memory, yet the report holds one memory-pressure finding for the
GI, with the GI's bytes counted once in its evidence."""

from pathlib import Path

import jsonschema

from watchdog.config import Policy
from watchdog.evaluation import replay, report_schema

TRACE = Path(__file__).parent / "data" / "handwritten-gi-memory-pressure.jsonl"
GIB = 1 << 30


def test_two_tenants_cis_of_one_gi_give_one_pool_finding_without_double_counting() -> None:
    report = replay(TRACE, policy=Policy())
    jsonschema.Draft202012Validator(report_schema()).validate(report)
    pressure = [f for f in report["findings"] if f["kind"] == "memory_pressure"]
    assert len(pressure) == 1, "the GI's pool once, not once per CI handle"
    [finding] = pressure
    assert (finding["key"], finding["culprit"], finding["victims"]) == ("memory_pressure/gi/GPU-h/1", "batch/b",
                                                                         ["ml/a"])
    assert finding["first_tick"] == 7  # 8 + 31 GiB of the GI's 40: 1 GiB free, under the 2 GiB threshold
    evidence = finding["evidence"]
    assert evidence["total_bytes"] == 40 * GIB and evidence["free_bytes"] == 1 * GIB  # not 80 GiB, not −38 GiB
    assert evidence["culprit_growth_bytes"] == 21 * GIB  # its own process, 10 → 31 GiB
    assert evidence["relief_order"] == "batch/b,ml/a"
    assert evidence["compute_instances"] == "MIG-ci0,MIG-ci1"
    [warning] = [f for f in report["findings"] if f["kind"] == "mig_memory_warning"]
    assert warning["key"] == "mig-memory/gi/GPU-h/1" and warning["evidence"]["profile"] == "4g.40gb"
    assert not [f for f in report["findings"] if f["kind"] in ("quota", "interference")]
