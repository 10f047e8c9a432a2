"""A trace's header records the policy in force: the recorder's one header, and a flight-recorder segment per
policy (a reload begins a new segment)."""

import dataclasses
import logging
from pathlib import Path

from watchdog.config import FlightRecorderSettings, Policy
from watchdog.config.runtime import RuntimePolicy
from watchdog.model import Snapshot, TickResult
from watchdog.trace import TraceHeader, TraceRecorder, TraceWriter, policy_json, read_trace
from watchdog.trace.flight import FlightRecorder, segments

DRY_RUN = Policy.model_validate({"action": {"interference": {"for_seconds": 30}}})
ENFORCE = Policy.model_validate({"action": {"mode": "enforce"}})


def results(recorded_tick, ticks: range):
    sample, attribution = recorded_tick
    for tick in ticks:
        moved = dataclasses.replace(sample, tick=tick, timestamp=1_700_000_000.0 + tick)
        yield TickResult(tick=tick, snapshot=Snapshot(node=sample.node, sample=moved, attribution=attribution))


def loaded(policy: Policy) -> RuntimePolicy:
    """A load as the agent resolves it: --mode and its own namespace are overlays the header does not carry."""
    return RuntimePolicy.resolve(policy, own_namespace="gpu-watchdog", mode_override="observe")


def test_the_header_carries_the_policy_as_written_and_reads_back(tmp_path: Path, recorded_tick) -> None:
    path = tmp_path / "t.jsonl"
    recorder = TraceRecorder(path, tick_seconds=1.0, source="test")
    recorder.apply_runtime(loaded(DRY_RUN))
    for result in results(recorded_tick, range(3)):
        recorder.tick_done(result)
    recorder.close()
    header = read_trace(path).header
    assert header.policy == policy_json(DRY_RUN)
    assert Policy.model_validate(header.policy) == DRY_RUN  # every field, the shape of a policy file
    assert header.policy["action"]["mode"] == "dry-run"  # the file's mode, not record's --mode observe
    assert "gpu-watchdog" not in header.policy["action"]["protected_namespaces"]


def test_a_trace_without_a_policy_still_reads(tmp_path: Path, recorded_tick) -> None:
    path = tmp_path / "old.jsonl"
    with TraceWriter(path, header=TraceHeader(node="node-a", tick_seconds=1.0, started=0.0)) as writer:
        writer.write(*recorded_tick)
    assert read_trace(path).header.policy is None
    assert '"policy"' not in path.read_text().splitlines()[0]


def test_a_reload_while_recording_one_file_keeps_the_header_and_says_so(tmp_path: Path, recorded_tick,
                                                                        caplog) -> None:
    path = tmp_path / "t.jsonl"
    recorder = TraceRecorder(path, tick_seconds=1.0, source="test")
    recorder.apply_runtime(loaded(DRY_RUN))
    with caplog.at_level(logging.WARNING, logger="watchdog.trace.recorder"):
        for result in results(recorded_tick, range(0, 2)):
            recorder.tick_done(result)
        recorder.apply_runtime(loaded(ENFORCE))
        for result in results(recorded_tick, range(2, 4)):
            recorder.tick_done(result)
    recorder.close()
    assert read_trace(path).header.policy == policy_json(DRY_RUN)
    [warning] = [record.getMessage() for record in caplog.records]
    assert "reloaded before tick 2" in warning and "--policy" in warning


def test_a_reloaded_policy_begins_a_new_flight_segment(tmp_path: Path, recorded_tick) -> None:
    flight = FlightRecorder(FlightRecorderSettings(enabled=True, directory=str(tmp_path)), tick_seconds=1.0)
    flight.apply_runtime(loaded(DRY_RUN))
    for result in results(recorded_tick, range(0, 5)):
        flight.tick_done(result)
    flight.apply_runtime(loaded(DRY_RUN.model_copy()))  # the same policy loaded again: the segment goes on
    for result in results(recorded_tick, range(5, 10)):
        flight.tick_done(result)
    flight.apply_runtime(loaded(ENFORCE))
    for result in results(recorded_tick, range(10, 15)):
        flight.tick_done(result)
    flight.close()
    traces = [read_trace(path) for path in segments(tmp_path)]
    assert [[record.tick for record in trace] for trace in traces] == [list(range(10)), list(range(10, 15))]
    assert [trace.header.policy for trace in traces] == [policy_json(DRY_RUN), policy_json(ENFORCE)]
