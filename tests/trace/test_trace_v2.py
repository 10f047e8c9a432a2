"""Version 2 (compact lines, attribution when it changes, gzip) reads back to exactly what version 1 says."""

import gzip
import json
from pathlib import Path

import pytest

from watchdog.config import Policy
from watchdog.evaluation import replay, simulate
from watchdog.trace import TraceError, TraceHeader, TraceWriter, decode_tick, read_trace
from watchdog.trace import parsing

ROOT = Path(__file__).resolve().parents[2]
V1_TRACES = sorted(path for path in (ROOT / "tests").rglob("*.jsonl")
                   if '"gpu-watchdog-trace"' in path.read_text().partition("\n")[0])
SCENARIO = ROOT / "scenarios" / "interference-timeslice-a100.yaml"
POLICY = Policy.model_validate({"action": {"interference": {"for_seconds": 30},
                                           "memory_pressure": {"for_seconds": 0}}})


def rewrite(source: Path, target: Path, *, version: int) -> Path:
    trace = read_trace(source)
    header = TraceHeader(node=trace.header.node, tick_seconds=trace.header.tick_seconds,
                         started=trace.header.started, agent_version=trace.header.agent_version,
                         source=trace.header.source, version=version)
    with TraceWriter(target, header=header) as writer:
        for record in trace:
            writer.write(record.sample, record.attribution, record.external_signals)
    return target


def without_path(report: dict) -> dict:
    return {**report, "trace": {**report["trace"], "path": None}}


@pytest.mark.parametrize("v1", V1_TRACES, ids=lambda path: path.name)
def test_every_version_1_trace_replays_to_the_same_report_as_version_2(tmp_path: Path, v1: Path) -> None:
    assert json.loads(v1.read_text().splitlines()[0])["version"] == 1
    v2 = rewrite(v1, tmp_path / "v2.jsonl.gz", version=2)
    assert read_trace(v2).header.version == 2
    assert without_path(replay(v2, policy=POLICY)) == without_path(replay(v1, policy=POLICY))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("recorded")
    paths = {"v1": out / "full.jsonl", "v2": out / "compact.jsonl", "v2.gz": out / "compact.jsonl.gz"}
    writers = [TraceWriter(path, header=TraceHeader(node="sim-node-1", tick_seconds=1.0, started=0.0,
                                                    version=1 if key == "v1" else 2)) for key, path in paths.items()]
    for sample, attribution in simulate(str(SCENARIO)):
        for writer in writers:
            writer.write(sample, attribution)
    for writer in writers:
        writer.close()
    return paths


def test_version_2_with_attribution_deltas_replays_like_its_full_equivalent(recorded: dict[str, Path]) -> None:
    lines = [json.loads(line) for line in recorded["v2"].read_text().splitlines()[1:]]
    assert any("attribution_from" in line for line in lines) and "attribution" in lines[0]
    full = replay(recorded["v1"], policy=POLICY)
    assert full["findings"] and full["evictions"]
    for key in ("v2", "v2.gz"):
        assert without_path(replay(recorded[key], policy=POLICY)) == without_path(full)
    records = zip(read_trace(recorded["v1"]), read_trace(recorded["v2.gz"]), strict=True)
    assert all(a.sample == b.sample and a.attribution == b.attribution for a, b in records)


def test_defaults_the_schema_requires_are_still_written(tmp_path: Path, recorded_tick) -> None:
    import dataclasses

    from watchdog.model import XidEvent

    sample, attribution = recorded_tick
    xid = XidEvent(gpu_index=0, gpu_uuid=sample.gpus[0].uuid, xid=0, event_type=0, timestamp=0.0)
    bare = dataclasses.replace(sample, tick=sample.tick + 1, gpus=(), xids=(xid,))
    path = tmp_path / "bare.jsonl"
    with TraceWriter(path, header=TraceHeader(node=sample.node, tick_seconds=1.0, started=0.0)) as writer:
        writer.write(sample, attribution)
        writer.write(bare, attribution)
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    assert lines[1]["sample"]["gpus"] == [] and lines[1]["sample"]["xids"][0]["gpu_index"] == 0
    assert decode_tick(lines[1], node=sample.node)[0] == bare
    records = list(read_trace(path))
    assert (records[0].sample, records[0].attribution) == (sample, attribution)
    # Read back through the plausibility gate, the Xid naming a GPU the tick does not list is refused, as live.
    assert records[1].sample.xids == () and [r.check for r in records[1].sample.rejected] == ["identity"]


def test_compact_gzip_is_smaller_than_version_1(recorded: dict[str, Path]) -> None:
    assert recorded["v2.gz"].stat().st_size * 5 < recorded["v1"].stat().st_size
    with gzip.open(recorded["v2.gz"], "rt") as stream:
        assert json.loads(stream.readline())["version"] == 2


def test_attribution_from_must_name_the_last_full_line(tmp_path: Path, recorded: dict[str, Path]) -> None:
    lines = recorded["v2"].read_text().splitlines()
    later = next(i for i, line in enumerate(lines) if '"attribution_from"' in line)
    broken = json.loads(lines[later])
    broken["attribution_from"] += 1000
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join([*lines[:later], json.dumps(broken)]) + "\n")
    with pytest.raises(TraceError, match=rf"^{path}:{later + 1}: attribution_from: refers to tick"):
        list(read_trace(path))
    header = json.loads(lines[0]) | {"version": 1}
    path.write_text("\n".join([json.dumps(header), lines[1], lines[later]]) + "\n")
    with pytest.raises(TraceError, match=rf"^{path}:3: attribution_from: not in version 1"):
        list(read_trace(path))


def test_a_line_needs_attribution_or_attribution_from(tmp_path: Path, recorded: dict[str, Path]) -> None:
    lines = recorded["v2"].read_text().splitlines()
    first = json.loads(lines[1])
    del first["attribution"]
    path = tmp_path / "none.jsonl"
    path.write_text("\n".join([lines[0], json.dumps(first)]) + "\n")
    with pytest.raises(TraceError, match=rf"^{path}:2: attribution: a tick line holds either attribution or"):
        list(read_trace(path))


def test_torn_last_line_keeps_the_ticks_before(tmp_path: Path, recorded: dict[str, Path],
                                               caplog: pytest.LogCaptureFixture) -> None:
    lines = recorded["v2"].read_text().splitlines()
    path = tmp_path / "torn.jsonl"
    path.write_text("\n".join(lines[:4]) + "\n" + lines[4][: len(lines[4]) // 2])  # the writer died mid-line
    trace = read_trace(path)
    assert [record.line for record in trace] == [2, 3, 4] and trace.torn_line == 5
    assert "torn last line" in caplog.text
    gz = tmp_path / "torn.jsonl.gz"
    data = recorded["v2.gz"].read_bytes()
    gz.write_bytes(data[: len(data) // 2])  # no gzip trailer: the process was killed
    trace = read_trace(gz)
    ticks = [record.tick for record in trace]
    assert ticks and ticks == sorted(ticks) and trace.torn_line is not None


def test_the_precise_path_alone_gives_the_same_records(recorded: dict[str, Path],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    fast = [(r.sample, r.attribution) for r in read_trace(recorded["v2"])]
    monkeypatch.setattr(parsing, "FAST", False)
    assert [(r.sample, r.attribution) for r in read_trace(recorded["v2"])] == fast


@pytest.mark.parametrize("line", [
    b'{"tick": 2, "timestamp": 2.0, "sample": {"gpus": []}, "attribution": {"healthy": true}, "x": 1}',
    b'{"tick": 2, "timestamp": 2.0, "sample": {"gpus": []}, "attribution": {"healthy": 1}}',
    b'{"tick": ' + b"9" * 150 + b', "timestamp": 2.0, "sample": {"gpus": []}, "attribution": {"healthy": true}}',
    b'{"tick": 2, "timestamp": 2.0, "sample": {"gpus": [{"index": 0, "uuid": "G", "name": "g", "gpu_util": 1.5}]},'
    b' "attribution": {"healthy": true}}',
])
def test_fast_and_precise_paths_refuse_the_same_lines(line: bytes) -> None:
    with pytest.raises(TraceError) as caught:
        parsing.load_line(line, "tick", path="t", line=2)
    with pytest.raises(TraceError) as precise:
        parsing.check(parsing.parse(line, path="t", line=2), "tick", path="t", line=2)
    assert str(caught.value) == str(precise.value)
