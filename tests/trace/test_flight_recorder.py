"""The flight recorder keeps a bounded, rotating trace and never stops the agent: full disk, deleted directory,
crash mid-write."""

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from watchdog.config import FlightRecorderSettings
from watchdog.model import Snapshot, TickResult
from watchdog.trace import read_trace
from watchdog.trace.flight import FlightRecorder, segments

KIB = 1024


def ticks(recorded_tick, count: int, *, start: int = 0, seconds: float = 1.0):
    sample, attribution = recorded_tick
    for tick in range(start, start + count):
        moved = dataclasses.replace(sample, tick=tick, timestamp=1_700_000_000.0 + tick * seconds)
        yield TickResult(tick=tick, snapshot=Snapshot(node=sample.node, sample=moved, attribution=attribution))


def recorder(directory: Path, **settings) -> FlightRecorder:
    return FlightRecorder(FlightRecorderSettings(enabled=True, directory=str(directory), **settings), tick_seconds=1.0)


def read_all(directory: Path) -> list[int]:
    return [record.tick for path in segments(directory) for record in read_trace(path)]


def test_segments_rotate_by_time_and_replay_in_order(tmp_path: Path, recorded_tick) -> None:
    flight = recorder(tmp_path, segment_seconds=10)
    for result in ticks(recorded_tick, 35):
        flight.tick_done(result)
    flight.close()
    assert len(segments(tmp_path)) == 4
    assert read_all(tmp_path) == list(range(35))
    counters = flight.counters()
    assert counters["ticks_written"] == 35 and counters["segments"] == 4 and counters["dropped"] == 0
    assert counters["bytes_written"] == sum(path.stat().st_size for path in segments(tmp_path))


def test_oldest_segments_go_first_past_max_bytes_and_max_age(tmp_path: Path, recorded_tick) -> None:
    flight = recorder(tmp_path / "bytes", segment_bytes=2 * KIB, max_bytes=8 * KIB, compress=False)
    for result in ticks(recorded_tick, 200):
        flight.tick_done(result)
    flight.close()
    on_disk = sum(path.stat().st_size for path in segments(tmp_path / "bytes"))
    assert on_disk <= 8 * KIB + 2 * KIB  # the limit, plus the last tick of the newest segment
    kept = read_all(tmp_path / "bytes")
    assert kept == list(range(kept[0], 200)) and kept[0] > 0 and flight.deleted > 0
    aged = recorder(tmp_path / "age", segment_seconds=10, max_age_seconds=30)
    for result in ticks(recorded_tick, 100):
        aged.tick_done(result)
    aged.close()
    kept = read_all(tmp_path / "age")
    # whole segments go, at rotation: at most max_age + two segments' worth is kept
    assert kept == list(range(kept[0], 100)) and 0 < kept[0] and 99 - kept[0] <= 30 + 2 * 10


def test_a_deleted_directory_is_recreated_without_losing_later_ticks(tmp_path: Path, recorded_tick) -> None:
    directory = tmp_path / "flight"
    flight = recorder(directory)
    results = list(ticks(recorded_tick, 10))
    for result in results[:5]:
        flight.tick_done(result)
    shutil.rmtree(directory)
    for result in results[5:]:
        flight.tick_done(result)
    flight.close()
    assert read_all(directory) == [5, 6, 7, 8, 9] and flight.dropped == 0


@pytest.fixture
def tiny_tmpfs(tmp_path: Path):
    """A real full disk: a 64 KiB tmpfs (mount(8) needs root, as in the project's test container)."""
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)], check=True)
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=True)


def test_a_full_disk_counts_drops_and_never_raises(tiny_tmpfs: Path, recorded_tick) -> None:
    flight = recorder(tiny_tmpfs, compress=False, segment_bytes=1024 * KIB, max_bytes=1024 * KIB)
    for result in ticks(recorded_tick, 200):
        flight.tick_done(result)  # a tick is ~3 KB uncompressed: the disk fills after about twenty
    assert flight.dropped > 0 and flight.ticks_written > 0
    kept = read_all(tiny_tmpfs)  # the torn end of the last segment is left behind with a warning
    assert kept[: flight.ticks_written] == list(range(flight.ticks_written))[: len(kept)]
    for path in segments(tiny_tmpfs):
        path.unlink()  # space again: the next tick is recorded
    flight.tick_done(next(ticks(recorded_tick, 1, start=500)))
    flight.close()
    assert read_all(tiny_tmpfs) == [500]


def test_a_crash_mid_segment_keeps_every_flushed_tick(tmp_path: Path, recorded_tick) -> None:
    flight = recorder(tmp_path)
    for result in ticks(recorded_tick, 20):
        flight.tick_done(result)
    # no close(): the process died; the gzip stream has no trailer
    [segment] = segments(tmp_path)
    trace = read_trace(segment)
    assert [record.tick for record in trace] == list(range(20)) and trace.torn_line is not None


def test_a_segment_larger_than_the_whole_budget_is_refused() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="segment_bytes must not exceed max_bytes"):
        FlightRecorderSettings(segment_bytes=2 * KIB, max_bytes=KIB)


def test_a_directory_of_segments_replays_like_one_trace(tmp_path: Path) -> None:
    from watchdog.config import Policy
    from watchdog.evaluation import replay, simulate
    from watchdog.trace import TraceHeader, TraceWriter

    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "interference-power-mig.yaml"
    policy = Policy.model_validate({"action": {"interference": {"for_seconds": 0}}})
    flight = recorder(tmp_path / "flight", segment_seconds=40)
    with TraceWriter(tmp_path / "whole.jsonl", header=TraceHeader(node="sim-node-1", tick_seconds=1.0,
                                                                  started=0.0)) as whole:
        for sample, attribution in simulate(str(scenario)):
            whole.write(sample, attribution)
            flight.tick_done(TickResult(tick=sample.tick, snapshot=Snapshot(node=sample.node, sample=sample,
                                                                            attribution=attribution)))
    flight.close()
    assert len(segments(tmp_path / "flight")) > 2
    from_segments, from_one = replay(tmp_path / "flight", policy=policy), replay(tmp_path / "whole.jsonl",
                                                                                   policy=policy)
    assert from_segments["findings"] == from_one["findings"] and from_segments["findings"]
    assert from_segments["evictions"] == from_one["evictions"] and from_segments["ticks"] == from_one["ticks"]
