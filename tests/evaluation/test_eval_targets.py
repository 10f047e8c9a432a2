"""The detector's targets on the labelled suite (scenarios/). A real test of detection: it fails when detection
regresses, and its message is the evaluation table naming the scenario and finding at fault. The targets and
their bounds are documented in docs/evaluation.md (Targets)."""

from pathlib import Path

import pytest

from watchdog.evaluation import Evaluation, evaluate, format_table

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
SCORED_KINDS = ("interference", "memory_pressure", "quota", "memory_warning")
OVERHANG_MEDIAN_MAX_TICKS = 10  # past offset + slack_ticks (default 10): a true finding clears within ~20 ticks


@pytest.fixture
def suite() -> tuple[Evaluation, str]:
    """A fresh evaluation of the whole suite and its table (a few seconds)."""
    evaluation = evaluate([SCENARIOS])
    return evaluation, format_table(evaluation)


def test_suite_meets_detection_targets(suite: tuple[Evaluation, str]) -> None:
    evaluation, table = suite
    for kind in SCORED_KINDS:
        score = evaluation.kinds[kind]
        assert score.truths > 0, f"the suite labels no {kind}\n{table}"
        assert score.precision is not None and score.precision >= 0.95, f"{kind} precision\n{table}"
        assert score.recall is not None and score.recall >= 0.95, f"{kind} recall\n{table}"
        after = score.latency_median_after_hysteresis
        assert after is not None and after <= 3, f"{kind} median latency after hysteresis\n{table}"
    assert evaluation.benign_interference_findings == 0, f"interference on benign scenarios\n{table}"
    for kind in ("unauthorized", "xid"):
        assert evaluation.kinds[kind].recall == 1.0, f"{kind} recall\n{table}"


def test_true_findings_end_with_their_cause(suite: tuple[Evaluation, str]) -> None:
    """Overlap alone would accept a finding lingering long after its cause: bound the overhang, count flapping."""
    evaluation, table = suite
    for kind in ("interference", "memory_pressure", "quota"):
        score = evaluation.kinds[kind]
        assert score.overhangs, f"no closed {kind} truth was detected, so its overhang is unmeasured\n{table}"
        median = score.overhang_median
        assert median is not None and median <= OVERHANG_MEDIAN_MAX_TICKS, f"{kind} overhang\n{table}"
        assert score.duplicates == 0, f"{kind} flaps: several episodes for one truth\n{table}"


def test_suite_evicts_exactly_the_expected_pods(suite: tuple[Evaluation, str]) -> None:
    evaluation, table = suite
    wrong = {s.name: (s.requested, s.truth.expect_evictions) for s in evaluation.scenarios if s.evictions_ok is False}
    assert not wrong, f"requested vs expected evictions: {wrong}\n{table}"
    blind = {s.name: s.quiet_violations for s in evaluation.scenarios if s.quiet_violations}
    assert not blind, f"evictions sent inside a no_evictions window: {blind}\n{table}"
    antagonist = next(s for s in evaluation.scenarios if s.name == "high-priority-antagonist")
    assert antagonist.requested == () and antagonist.scored.kinds["interference"].detected == 1
