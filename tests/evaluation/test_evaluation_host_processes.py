"""The unauthorized_host row: matched by command and owners, perfect on its scenarios, never an eviction."""

from __future__ import annotations

from pathlib import Path

from watchdog.evaluation import evaluate, format_table, parse_truth
from watchdog.evaluation.matching import matches

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def finding(*, command="python3", victims=("prod/infer",), culprit=None, reported=64, last=160) -> dict:
    return {"kind": "unauthorized_host", "key": "unauthorized-host/MIG-1/4242", "domain": "mig/MIG-1",
            "reported_tick": reported, "first_tick": reported, "last_tick": last, "victims": list(victims),
            "culprit": culprit, "tenant": None, "evidence": {"command": command, "pid": 4242}}


def test_a_finding_matches_by_command_owners_and_window() -> None:
    truth = parse_truth({"unauthorized_host": [{"command": "python3", "onset": 60, "offset": 160,
                                                "victims": ["prod/infer"]}]}, source="t")
    entry = truth.unauthorized_host[0]
    assert matches(finding(), entry, kind="unauthorized_host", slack=10)
    assert not matches(finding(command="xmrig"), entry, kind="unauthorized_host", slack=10)
    assert not matches(finding(victims=("batch/train",)), entry, kind="unauthorized_host", slack=10)
    assert not matches(finding(culprit="batch/train"), entry, kind="unauthorized_host", slack=10)
    assert not matches(finding(reported=180, last=190), entry, kind="unauthorized_host", slack=10)


def test_its_scenarios_score_perfectly_and_evict_nothing() -> None:
    evaluation = evaluate([SCENARIOS / "host-process-mig.yaml", SCENARIOS / "trap-host-node-agents.yaml"])
    table = format_table(evaluation)
    row = evaluation.kinds["unauthorized_host"]
    assert (row.truths, row.detected, row.findings, row.true_findings) == (1, 1, 1, 1), table
    assert row.latency_median_after_hysteresis == 0, table
    assert all(result.requested == () and result.sent == () for result in evaluation.scenarios), table
    assert all(kind.findings == 0 for name, kind in evaluation.kinds.items() if name != "unauthorized_host"), table
