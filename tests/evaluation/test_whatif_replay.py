"""The what-if worker's replay (evaluation/whatif.py), in this process: flight-recorder segments under the recorded
policy (A) and a posted one (B), in lockstep; the same result as `replay --compare --report json`; a window; a
partial result at the CPU bound that is the full result of the ticks it reached; no data; nothing sent anywhere."""

import dataclasses
import json
import socket
from pathlib import Path

import jsonschema
import pytest

from watchdog.cli import main
from watchdog.config import FlightRecorderSettings, Policy
from watchdog.config.runtime import RuntimePolicy
from watchdog.evaluation import report_schema, simulate
from watchdog.evaluation import whatif
from watchdog.evaluation.whatif import run_whatif, window_segments
from watchdog.model import Snapshot, TickResult
from watchdog.service.whatif_jobs import WhatIfRequest
from watchdog.trace.flight import FlightRecorder, segments

ROOT = Path(__file__).resolve().parents[2]
POWER = ROOT / "scenarios" / "interference-power-mig.yaml"
EPOCH = 1_700_000_000.0
SLOW = Policy.model_validate({"action": {"interference": {"for_seconds": 600}}})
QUICK = Policy.model_validate({"action": {"interference": {"for_seconds": 0}}})
POSTED = {"action": {"mode": "enforce", "interference": {"for_seconds": 30}}}


@pytest.fixture(scope="module")
def flight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recorder's segments of the power scenario: the slow policy, then (a reload at tick 50) the quick one."""
    directory = tmp_path_factory.mktemp("flight")
    recorder = FlightRecorder(FlightRecorderSettings(enabled=True, directory=str(directory)), tick_seconds=1.0)
    recorder.apply_runtime(RuntimePolicy.resolve(SLOW))
    for sample, attribution in simulate(str(POWER)):
        if sample.tick == 50:
            recorder.apply_runtime(RuntimePolicy.resolve(QUICK))
        sample = dataclasses.replace(sample, timestamp=EPOCH + sample.tick)
        recorder.tick_done(TickResult(tick=sample.tick, snapshot=Snapshot(node=sample.node, sample=sample,
                                                                           attribution=attribution)))
    recorder.close()
    assert len(segments(directory)) == 2
    return directory


def request(directory: Path, *, since=None, until=None, cpu=1800.0) -> WhatIfRequest:
    return WhatIfRequest(str(directory), Policy.model_validate(POSTED), since, until, cpu, "gpu-watchdog", None)


def run(req: WhatIfRequest):
    seen = []
    outcome = run_whatif(req, seen.append)
    assert all(later.ticks_done >= earlier.ticks_done for earlier, later in zip(seen, seen[1:]))
    return outcome


def test_the_result_is_what_replay_compare_prints(flight: Path, tmp_path: Path, capsys) -> None:
    outcome = run(request(flight))
    assert (outcome.state, outcome.error, outcome.segments) == ("done", None, 2)
    policy_file = tmp_path / "candidate.yaml"
    policy_file.write_text(json.dumps(POSTED))
    assert main(["replay", str(flight), "--compare", str(policy_file), "--report", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    # B is named "given" (a policy handed to the replay) where the command names its file.
    printed["b"]["policy_source"] = "given"
    assert outcome.result == printed
    assert outcome.ticks_done == printed["a"]["ticks"] == printed["b"]["ticks"]
    assert outcome.result["a"]["policy_changes"] == [{"tick": 50, "path": str(segments(flight)[1])}]
    for report in (outcome.result["a"], outcome.result["b"]):
        jsonschema.Draft202012Validator(report_schema()).validate(report)
    assert outcome.result["diff"]["evictions"]["only_b"]  # enforce evicts where the recorded dry-run did not


def test_a_window_keeps_its_ticks_and_skips_segments_outside_it(flight: Path) -> None:
    outcome = run(request(flight, since=EPOCH + 10, until=EPOCH + 30))
    a, b = outcome.result["a"], outcome.result["b"]
    assert (a["first_tick"], a["last_tick"], a["ticks"]) == (10, 30, 21)
    assert (b["first_tick"], b["last_tick"], b["ticks"]) == (10, 30, 21)
    assert outcome.segments == 1 and "policy_changes" not in a
    late = run(request(flight, since=EPOCH + 60))
    assert late.segments == 1 and late.result["a"]["first_tick"] == 60
    assert window_segments(flight, since=EPOCH + 60, until=None) == segments(flight)[1:]


def test_at_the_cpu_bound_the_partial_result_is_the_full_result_of_the_ticks_reached(flight, monkeypatch) -> None:
    spent = iter(range(10_000))
    monkeypatch.setattr(whatif, "_cpu_seconds", lambda: float(next(spent)))  # one CPU second per reading
    partial = run(request(flight, cpu=40.0))
    assert partial.state == "cancelled" and "partial" in partial.error
    a, b = partial.result["a"], partial.result["b"]
    assert a["ticks"] == b["ticks"] == partial.ticks_done and 0 < partial.ticks_done < 100
    assert a["last_tick"] == b["last_tick"]  # the two policies stopped at the same tick
    monkeypatch.setattr(whatif, "_cpu_seconds", lambda: 0.0)
    prefix = run(request(flight, until=EPOCH + a["last_tick"]))
    assert prefix.state == "done" and prefix.result == partial.result


def test_the_cpu_bound_also_holds_while_reading_ticks_before_the_window(flight, monkeypatch) -> None:
    spent = iter(range(10_000))
    monkeypatch.setattr(whatif, "_cpu_seconds", lambda: float(next(spent)))  # one CPU second per reading
    late = run(request(flight, since=EPOCH + 10_000, cpu=5.0))  # no tick in the window: all are read and skipped
    assert (late.state, late.result, late.ticks_done) == ("cancelled", None, 0) and "before the window" in late.error


def test_no_tick_in_the_window_is_no_data(flight: Path, tmp_path: Path) -> None:
    future = run(request(flight, since=EPOCH + 10_000))
    assert (future.state, future.result) == ("no_data", None) and "no tick" in future.error
    empty = run(request(tmp_path / "absent"))
    assert (empty.state, empty.segments) == ("no_data", 0) and "no segment" in empty.error


def test_after_an_agent_restart_the_newest_run_is_replayed(tmp_path: Path) -> None:
    """A hostPath keeps the segments of the agent before its restart, whose ticks count from 0 again."""
    ticks = list(simulate(str(POWER)))
    for run_index, (begins, count) in enumerate(((EPOCH, 60), (EPOCH + 1000, 30))):
        recorder = FlightRecorder(FlightRecorderSettings(enabled=True, directory=str(tmp_path)), tick_seconds=1.0)
        recorder.apply_runtime(RuntimePolicy.resolve(SLOW))
        for sample, attribution in ticks[:count]:
            sample = dataclasses.replace(sample, timestamp=begins + sample.tick)
            recorder.tick_done(TickResult(tick=sample.tick, snapshot=Snapshot(node=sample.node, sample=sample,
                                                                               attribution=attribution)))
        recorder.close()
    newest = run(request(tmp_path))
    assert newest.state == "done" and newest.since == EPOCH + 1000 and newest.segments == 1
    assert (newest.result["a"]["first_tick"], newest.result["a"]["ticks"]) == (0, 30)
    older = run(request(tmp_path, until=EPOCH + 500))  # a window within the older run replays that one
    assert older.since is None and older.result["a"]["ticks"] == 60


def test_the_replay_sends_nothing(flight: Path, monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the what-if replay opened a connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    assert run(request(flight)).state == "done"
