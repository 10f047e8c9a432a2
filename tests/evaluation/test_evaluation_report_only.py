"""An interference truth labelled ``report_only`` (a gi or pcie domain judged by a proxy, no tenant override) is
covered by the observed ticks of its WARNING finding; an ordinary entry only by actionable (critical) ticks."""

from watchdog.evaluation.matching import coverage
from watchdog.evaluation.truth import parse_truth

FINDING = {"key": "interference/gi/GPU-0/1/batch/scan", "first_tick": 12}
WARNING_TICKS = {(FINDING["key"], 12): {t: False for t in range(12, 20)}}  # observed, never critical


def entry(**extra):
    data = {"interference": [{"victim": "prod/train", "culprit": "batch/scan", "onset": 10, "offset": 20, **extra}]}
    return parse_truth(data, source="t").interference[0]


def test_a_report_only_entry_counts_the_warning_ticks():
    assert coverage(entry(report_only=True), [FINDING], kind="interference", episode_ticks=WARNING_TICKS,
                    end_tick=30) == 0.8


def test_an_ordinary_entry_counts_only_actionable_ticks():
    assert coverage(entry(), [FINDING], kind="interference", episode_ticks=WARNING_TICKS, end_tick=30) == 0.0
