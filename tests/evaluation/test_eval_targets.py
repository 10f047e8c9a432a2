"""The detector's targets on the labelled suite (scenarios/). A real test of detection: it fails when detection
regresses, and its message is the evaluation table naming the scenario and finding at fault."""

from pathlib import Path

from watchdog.evaluation import evaluate, format_table

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_suite_meets_detection_targets() -> None:
    evaluation = evaluate([SCENARIOS])
    table = format_table(evaluation)
    for kind in ("interference", "memory_pressure", "quota"):
        score = evaluation.kinds[kind]
        assert score.truths > 0, f"the suite labels no {kind}\n{table}"
        assert score.precision is not None and score.precision >= 0.95, f"{kind} precision\n{table}"
        assert score.recall is not None and score.recall >= 0.95, f"{kind} recall\n{table}"
        after = score.latency_median_after_hysteresis
        assert after is not None and after <= 3, f"{kind} median latency after hysteresis\n{table}"
    assert evaluation.benign_interference_findings == 0, f"interference on benign scenarios\n{table}"
    for kind in ("unauthorized", "xid"):
        assert evaluation.kinds[kind].recall == 1.0, f"{kind} recall\n{table}"


def test_suite_evicts_exactly_the_expected_pods() -> None:
    evaluation = evaluate([SCENARIOS])
    wrong = {s.name: (s.requested, s.truth.expect_evictions) for s in evaluation.scenarios if s.evictions_ok is False}
    assert not wrong, f"requested vs expected evictions: {wrong}"
    antagonist = next(s for s in evaluation.scenarios if s.name == "high-priority-antagonist")
    assert antagonist.requested == () and antagonist.scored.kinds["interference"].detected == 1
