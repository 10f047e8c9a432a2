"""What a person reads of a replay and an evaluation: counts in good English, columns that line up whatever the
result, a legend under the eval table, and a timeline plot whose every mark is named in a legend."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from watchdog.evaluation import replay, simulate
from watchdog.evaluation.evaluate import LEGEND, Evaluation, format_table
from watchdog.evaluation.matching import KINDS, KindScore
from watchdog.evaluation.replay_policy import load_policy_file
from watchdog.evaluation.report_text import compare, format_compare, format_text, plural
from watchdog.trace import TraceHeader, TraceWriter

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "scenarios" / "demo.yaml"


def finding(key: str, *, first: int = 10, last: int = 10, **evidence) -> dict:
    return {"kind": "interference", "key": key, "domain": "gpu/GPU-0/power", "resource": "power", "tenant": "b",
            "first_tick": first, "reported_tick": first, "last_tick": last, "ticks_reported": last - first + 1,
            "victims": ["a/infer"], "culprit": "b/train", "severity": "critical", "evidence": evidence,
            "message": ""}


def eviction(tick: int, result: str, pod: str = "train") -> dict:
    return {"tick": tick, "namespace": "b", "pod": pod, "priority": 0,
            "finding": {"kind": "interference", "key": "k"}, "protects": [], "result": result,
            "sent": result == "dry_run", "detail": ""}


def report(findings: list, evictions: list, ticks: int) -> dict:
    return {"trace": {"path": "t.jsonl", "node": "n1"}, "ticks": ticks, "first_tick": 0, "last_tick": ticks - 1,
            "mode": "dry-run", "findings": findings, "evictions": evictions}


def test_counts_are_singular_for_one_and_plural_otherwise() -> None:
    assert [plural(n, "episode") for n in (0, 1, 2)] == ["0 episodes", "1 episode", "2 episodes"]
    one = format_text(report([finding("k")], [eviction(10, "dry_run")], ticks=1)).splitlines()
    assert one[0].startswith("t.jsonl: node n1, 1 tick (0–0)") and one[1] == "findings: 1 episode"
    assert "(tick 10)" in one[2]  # one tick of a finding: not "ticks 10–10"
    two = format_text(report([finding("k", last=20), finding("j", first=30, last=40)], [], ticks=50)).splitlines()
    assert two[0].startswith("t.jsonl: node n1, 50 ticks") and two[1] == "findings: 2 episodes"
    assert "(ticks 10–20)" in two[2]


def test_compare_columns_line_up_around_a_long_result() -> None:
    a = report([], [eviction(5, "dry_run"), eviction(7, "already_evicted"), eviction(120, "cooldown", "x")], 200)
    b = report([], [eviction(9, "dry_run")], 200)
    lines = format_compare(compare(a, b), name_a="a.yaml", name_b="b.yaml").splitlines()
    rows = [line for line in lines if line.startswith(("  only in", "  shifted"))]
    assert len(rows) == 3 and any("already_evicted" in row for row in rows)
    # the pod column begins at one offset on every row, after the widest result
    starts = {row.index("b/") for row in rows}
    assert len(starts) == 1 and rows[0][starts.pop() - 1] == " "
    ticks = {row.index(" tick ") + len(" tick ") for row in rows}
    assert len(ticks) == 1  # the tick numbers share a right-aligned column
    text = format_text(report([], [eviction(7, "already_evicted"), eviction(120, "dry_run")], 200)).splitlines()
    assert text[-1].index("b/") == text[-2].index("b/")


def test_the_text_report_names_a_capped_z_score_for_what_it_is() -> None:
    capped = finding("k", z_score=1e6, z_score_capped=True, baseline_std=0.0)
    line = format_text(report([capped, finding("j", z_score=4.5)], [], ticks=20)).splitlines()
    assert "baseline flat (σ = 0)" in line[2] and "1e+06" not in line[2] and "1000000" not in line[2]
    assert "z 4.5" in line[3]


def test_the_eval_table_has_a_legend_for_every_abbreviated_column() -> None:
    table = format_table(Evaluation([], {kind: KindScore(kind) for kind in KINDS})).splitlines()
    abbreviated = [name for name in table[0].split() if "." in name or "-" in name]
    assert len(abbreviated) == 10
    legend = "\n".join(LEGEND)
    assert all(line in table for line in LEGEND)
    assert all(f"{name}:" in legend or f"{name}," in legend for name in abbreviated)


@pytest.fixture(scope="module")
def demo_timeline(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("matplotlib")
    from watchdog.evaluation.plot import TimelineRecorder

    path = tmp_path_factory.mktemp("plot") / "demo.jsonl.gz"
    ticks = simulate(str(DEMO))
    with TraceWriter(path, header=TraceHeader(node="sim-node-1", tick_seconds=1.0, started=0.0)) as writer:
        for sample, attribution in itertools.islice(ticks, 200):
            writer.write(sample, attribution)
    ticks.close()
    timeline = TimelineRecorder()
    result = replay(path, policy=load_policy_file(DEMO)[0], on_step=timeline)
    figure = timeline.figure(result)
    yield figure
    import matplotlib.pyplot as plt

    plt.close(figure)


def legend_labels(ax) -> list[str]:
    legends = [axes.get_legend() for axes in ax.figure.axes if axes.get_legend() is not None
               and axes.bbox.bounds == ax.bbox.bounds]
    return [text.get_text() for legend in legends for text in legend.get_texts()]


def test_the_plot_names_each_victim_the_band_the_strip_and_every_finding(demo_timeline) -> None:
    from watchdog.evaluation.plot import BAND_LABEL, STRIP_LABEL

    power, others = demo_timeline.axes[0], demo_timeline.axes[1]
    assert power.get_title(loc="left") == "power · GPU 0"  # not "power · power"
    labels = legend_labels(power)
    victims = [label for label in labels if label.endswith("(victim)")]
    assert sorted(victims) == ["analytics/embed-0 (victim)", "batch/encode-0 (victim)", "ml-prod/inference-0 (victim)"]
    assert "ml-research/sweep-7 (culprit)" in labels
    assert {BAND_LABEL, STRIP_LABEL, "clock loss", "interference finding (first–last tick)"} <= set(labels)
    assert len(labels) == len(set(labels))  # no entry twice
    colours = {line.get_label(): line.get_color() for line in power.get_lines()}
    assert len({colours[victim] for victim in victims}) == len(victims)  # a colour of its own each
    assert others.get_title(loc="left") == "findings outside the domains above"
    kinds = {label for label in legend_labels(others)}
    assert {"xid finding (instant)", "unauthorized finding", "quota finding"} <= kinds
    rows = [tick.get_text() for tick in others.get_yticklabels()]
    assert "unauthorized: batch/scavenger-0" in rows and "xid: analytics/etl-2" in rows
