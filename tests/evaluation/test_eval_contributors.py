"""Several batch pods capping one GPU together never block the serving pod's relief.

Both scenarios run through the real detector, rules and pacer (watchdog.evaluation). A lower-priority batch pod,
listed as a victim because its clock fell too, is not above the culprit and so vetoes no eviction ("culprit priority
… is not lower than victim …'s"): the lowest-priority driver goes and protects exactly the victims above it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.evaluation.evaluate import evaluate_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


@pytest.mark.parametrize(
    ("name", "protects"),
    [
        ("tp-power-two-contributors", [("prod", "serve", 100_000)]),
        ("tp-power-three-contributors", [("vision", "finetune", 20), ("prod", "serve", 100_000)]),
    ],
)
def test_the_lowest_priority_driver_goes_and_protects_exactly_those_above_it(name, protects):
    result = evaluate_scenario(SCENARIOS / f"{name}.yaml")
    assert result.scored.kinds["interference"].recall == 1.0
    assert result.requested == ("research/sweep",) and len(result.sent) == 1
    [sent] = [e for e in result.report["evictions"] if e["sent"]]
    assert [(p["namespace"], p["pod"], p["priority"]) for p in sent["protects"]] == protects
    assert not [e for e in result.report["evictions"] if e["result"] == "not_lower_priority"]
