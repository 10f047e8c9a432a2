"""Replay: any valid trace (hand-written or recorded) gives a deterministic report that matches its schema."""

import json
from pathlib import Path

import jsonschema
import pytest

from watchdog.config import Policy
from watchdog.evaluation import replay, report_schema, run_scenario, simulate
from watchdog.evaluation.report import ReportBuilder
from watchdog.trace import TraceError, TraceHeader, TraceWriter

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[2]


def act_at_once() -> Policy:
    return Policy.model_validate({"action": {"memory_pressure": {"for_seconds": 0}}})


def test_hand_written_trace_replays_to_a_valid_report() -> None:
    report = replay(DATA / "handwritten-memory-pressure.jsonl", policy=act_at_once())
    jsonschema.Draft202012Validator(report_schema()).validate(report)
    assert (report["ticks"], report["first_tick"], report["last_tick"]) == (12, 0, 11)
    assert report["trace"]["source"] == "hand-written"
    [finding] = report["findings"]
    assert (finding["kind"], finding["culprit"], finding["victims"]) == ("memory_pressure", "batch/b", ["ml/a"])
    assert finding["reported_tick"] <= finding["last_tick"] == 11
    # one request, then the cooldown it started, each reported once; no per-tick repetition
    assert [(e["tick"], e["pod"], e["result"], e["sent"]) for e in report["evictions"]] == [
        (finding["reported_tick"], "b", "dry_run", True),
        (finding["reported_tick"] + 1, "b", "cooldown", False),
    ]
    assert report["evictions"][0]["protects"] == [{"namespace": "ml", "pod": "a", "priority": 1000}]


def test_replay_is_deterministic_and_follows_the_policy_mode() -> None:
    path = DATA / "handwritten-memory-pressure.jsonl"
    assert replay(path, policy=act_at_once()) == replay(path, policy=act_at_once())
    observe = Policy.model_validate({"action": {"mode": "observe", "memory_pressure": {"for_seconds": 0}}})
    report = replay(path, policy=observe)
    assert report["mode"] == "observe" and report["evictions"][0]["result"] == "observed"


def test_pending_decisions_are_not_reported() -> None:
    report = replay(DATA / "handwritten-memory-pressure.jsonl", policy=Policy())  # memory_pressure waits 30 s
    assert report["findings"] and report["evictions"] == []


def test_invalid_trace_fails_with_file_and_line(tmp_path: Path) -> None:
    lines = (DATA / "handwritten-memory-pressure.jsonl").read_text().splitlines()
    broken = json.loads(lines[4])
    broken["sample"]["gpus"][0]["memory_used_bytes"] = -1
    lines[4] = json.dumps(broken)
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=rf"^{path}:5: sample\.gpus\.0\.memory_used_bytes: -1 is less than"):
        replay(path, policy=Policy())


def test_recorded_simulation_replays_to_the_live_report(tmp_path: Path) -> None:
    """Record the simulated run to a trace, replay it: same findings and decisions as running it directly."""
    scenario = ROOT / "scenarios" / "interference-timeslice-a100.yaml"
    policy = Policy.model_validate({"action": {"interference": {"for_seconds": 30}}})
    source = {"path": "x", "node": "sim-node-1", "tick_seconds": 1.0, "started": 0.0, "agent_version": "t",
              "source": None}
    live = ReportBuilder(source=source, mode="dry-run")
    for step in run_scenario(str(scenario), policy=policy):
        live.add(step)
    path = tmp_path / "recorded.jsonl"
    with TraceWriter(path, header=TraceHeader(node="sim-node-1", tick_seconds=1.0, started=0.0)) as writer:
        for sample, attribution in simulate(str(scenario)):
            writer.write(sample, attribution)
    replayed = replay(path, policy=policy)
    expected = live.finish()
    assert replayed["findings"] == expected["findings"] and replayed["findings"]
    assert replayed["evictions"] == expected["evictions"]
    assert any(e["sent"] and e["pod"] == "hog" for e in replayed["evictions"])


def test_docs_report_schema_is_the_package_schema() -> None:
    assert json.loads((ROOT / "docs" / "report.schema.json").read_text()) == report_schema()
