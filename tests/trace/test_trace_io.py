"""Trace files: the writer's output reads back, and a bad line is named by file, line and field."""

import io
import json
from dataclasses import fields
from pathlib import Path

import jsonschema
import pytest

from watchdog.model import (Attribution, GpuSample, MigSample, NodeSample, PodInfo, ProcessSample, VgpuSample,
                            XidEvent)
from watchdog.trace import TraceError, TraceHeader, TraceWriter, encode_tick, read_trace, schema

HEADER = {"format": "gpu-watchdog-trace", "version": 1, "node": "node-a", "tick_seconds": 1.0,
          "started": 1_700_000_000.0, "agent_version": "0.1.0"}


def write_lines(path: Path, *lines: object) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def test_writer_output_reads_back_exactly(tmp_path: Path, recorded_tick: tuple[NodeSample, Attribution]) -> None:
    sample, attribution = recorded_tick
    later = NodeSample(node=sample.node, tick=sample.tick + 2, timestamp=sample.timestamp + 2, gpus=sample.gpus)
    path = tmp_path / "t.jsonl"
    with TraceWriter(path, header=TraceHeader(node="node-a", tick_seconds=1.0, started=5.0, source="test")) as w:
        w.write(sample, attribution)
        w.write(later, attribution)
    trace = read_trace(path)
    assert trace.header == TraceHeader(node="node-a", tick_seconds=1.0, started=5.0, source="test")
    records = list(trace)
    assert [r.line for r in records] == [2, 3] and [r.tick for r in records] == [17, 19]
    assert records[0].sample == sample and records[1].sample == later
    assert dict(records[0].attribution.pods) == dict(attribution.pods)
    assert list(trace)[0].sample == sample  # iterating again re-reads the file


def test_writer_flushes_every_line_to_a_stream(recorded_tick: tuple[NodeSample, Attribution]) -> None:
    stream = io.StringIO()
    writer = TraceWriter(stream, header=TraceHeader(node="n", tick_seconds=2.0, started=0.0))
    writer.write(*recorded_tick)
    writer.close()
    assert not stream.closed  # a stream the caller opened stays open
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["format"] == "gpu-watchdog-trace"
    assert writer.ticks_written == 1


def test_every_written_line_validates_against_the_shipped_schema(
    recorded_tick: tuple[NodeSample, Attribution],
) -> None:
    validator = jsonschema.Draft202012Validator(schema())
    validator.validate(HEADER)
    validator.validate(encode_tick(*recorded_tick))


@pytest.mark.parametrize(
    ("definition", "cls"),
    [("process", ProcessSample), ("mig", MigSample), ("gpu", GpuSample), ("xid", XidEvent), ("sample", NodeSample),
     ("pod", PodInfo), ("vgpu", VgpuSample)],
)
def test_schema_covers_every_model_field(definition: str, cls: type) -> None:
    """A field added to watchdog.model must be added to the trace schema (and docs) too, or traces break."""
    properties = set(schema()["$defs"][definition]["properties"]) - {"devices"}  # pod.devices: hand-written only
    assert properties == {f.name for f in fields(cls)}


def test_docs_schema_is_the_package_schema() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "trace.schema.json"
    assert json.loads(docs.read_text()) == schema()


@pytest.mark.parametrize(
    ("bad_tick_line", "expected"),
    [
        ("{not json", r":3: \(line\): not valid JSON"),
        ({"tick": 2, "timestamp": 2.0, "attribution": {"healthy": True}}, r":3: \(line\): 'sample' is a required property"),
        ({"tick": 2, "timestamp": 2.0, "sample": {"gpus": [{"index": 0, "uuid": "GPU-a", "name": "g",
                                                            "power_watts": "hot"}]}, "attribution": {"healthy": True}},
         r":3: sample\.gpus\.0\.power_watts: 'hot' is not of type 'number', 'null'"),
        ({"tick": 2, "timestamp": 2.0, "sample": {"gpus": [{"index": 0, "uuid": "GPU-a", "name": "g",
                                                            "gpu_util": 85}]}, "attribution": {"healthy": True}},
         r":3: sample\.gpus\.0\.gpu_util: 85 is greater than the maximum of 1"),
        ({"tick": 2, "timestamp": 2.0, "sample": {"gpus": [], "extra": 1}, "attribution": {"healthy": True}},
         r":3: sample: Additional properties are not allowed \('extra' was unexpected\)"),
        ({"tick": 2, "timestamp": 2.0, "sample": {"gpus": []}, "attribution": {"healthy": True, "processes": {"x": "a/b"}}},
         r":3: attribution\.processes: 'x' does not match"),
        ({"tick": 1, "timestamp": 2.0, "sample": {"gpus": []}, "attribution": {"healthy": True}},
         r":3: tick: 1 does not follow the previous 1"),
        ({"tick": 2, "timestamp": 2.0, "sample": {"node": "other", "gpus": []}, "attribution": {"healthy": True}},
         r":3: sample\.node: 'other' differs from the header's 'node-a'"),
        ({"tick": 2, "timestamp": 2.0, "sample": {"gpus": []}, "attribution": {}},
         r":3: attribution: 'healthy' is a required property"),
        ({"tick": 2, "timestamp": 2.0, "sample": {"gpus": [{"index": 0, "uuid": "GPU-a", "name": "g", "instances": [
            {"uuid": "MIG-a", "gpu_index": 0, "gpu_instance": 1, "compute_instance": 0, "profile": "1g.10gb"}]}]},
          "attribution": {"healthy": True}},
         r":3: sample\.gpus\.0: 'mig_enabled' is a required property"),
        ({"tick": 2, "timestamp": 2.0, "sample": {"gpus": [{"index": 0, "uuid": "GPU-a", "name": "g",
                                                            "mig_enabled": False, "instances": [
            {"uuid": "MIG-a", "gpu_index": 0, "gpu_instance": 1, "compute_instance": 0, "profile": "1g.10gb"}]}]},
          "attribution": {"healthy": True}},
         r":3: sample\.gpus\.0\.mig_enabled: True was expected"),
        ({"tick": 2, "timestamp": 2.0, "sample": {"gpus": []}, "attribution": {"healthy": True},
          "external_signals": {"api": 1.0}},
         r":3: external_signals: 'api' does not match"),
        ({"tick": 2, "timestamp": 2.0, "sample": {"gpus": []}, "attribution": {"healthy": True},
          "external_signals": {"web/api": "slow"}},
         r":3: external_signals\.web/api: 'slow' is not of type 'number'"),
    ],
)
def test_bad_line_is_reported_with_file_line_and_field(tmp_path: Path, bad_tick_line: object, expected: str) -> None:
    good = {"tick": 1, "timestamp": 1.0, "sample": {"gpus": []}, "attribution": {"healthy": True}}
    path = write_lines(tmp_path / "bad.jsonl", HEADER, good, bad_tick_line)
    records = iter(read_trace(path))
    assert next(records).tick == 1  # lines before the bad one are still delivered
    with pytest.raises(TraceError, match=f"^{path}{expected}") as caught:
        next(records)
    assert caught.value.line == 3


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ({**HEADER, "version": 3}, r":1: version: unsupported trace version 3 \(this reader knows 1 and 2\)"),
        ({k: v for k, v in HEADER.items() if k != "node"}, r":1: \(line\): 'node' is a required property"),
        ({**HEADER, "tick_seconds": 0}, r":1: tick_seconds: 0 is less than or equal to the minimum of 0"),
        ({**HEADER, "format": "csv"}, r":1: format: 'gpu-watchdog-trace' was expected"),
    ],
)
def test_bad_header_is_refused_when_opening(tmp_path: Path, header: dict, expected: str) -> None:
    path = write_lines(tmp_path / "h.jsonl", header)
    with pytest.raises(TraceError, match=f"^{path}{expected}"):
        read_trace(path)


def test_empty_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    with pytest.raises(TraceError, match=r":1: \(line\): empty trace"):
        read_trace(path)


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    good = {"tick": 4, "timestamp": 1.0, "sample": {"gpus": []}, "attribution": {"healthy": True}}
    path = write_lines(tmp_path / "b.jsonl", HEADER, "", good, "")
    assert [r.line for r in read_trace(path)] == [3]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"tick": 2, "timestamp": 2.0, "sample": {"gpus": [{"index": 0, "uuid": "GPU-a", "name": "g", '
         '"gpu_util": NaN}]}, "attribution": {"healthy": true}}',
         r":3: sample\.gpus\.0\.gpu_util: NaN is not a JSON number"),
        ('{"tick": 2, "timestamp": Infinity, "sample": {"gpus": []}, "attribution": {"healthy": true}}',
         r":3: timestamp: Infinity is not a JSON number"),
        ('{"tick": 2, "timestamp": 2.0, "sample": {"gpus": []}, "attribution": {"healthy": true}, '
         '"external_signals": {"web/api": -Infinity}}',
         r":3: external_signals\.web/api: -Infinity is not a JSON number"),
    ],
)
def test_non_finite_literals_are_refused_with_line_and_field(tmp_path: Path, text: str, expected: str) -> None:
    """Python's json reads NaN/Infinity although JSON has no such numbers; a trace must not smuggle them in."""
    good = {"tick": 1, "timestamp": 1.0, "sample": {"gpus": []}, "attribution": {"healthy": True}}
    path = write_lines(tmp_path / "nan.jsonl", HEADER, good, text)
    records = iter(read_trace(path))
    assert next(records).tick == 1
    with pytest.raises(TraceError, match=f"^{path}{expected}") as caught:
        next(records)
    assert caught.value.line == 3


def test_non_finite_header_is_refused(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "h.jsonl", json.dumps(HEADER).replace('"started": 1700000000.0', '"started": NaN'))
    with pytest.raises(TraceError, match=r":1: started: NaN is not a JSON number"):
        read_trace(path)


def test_mig_gpu_with_instances_is_accepted(tmp_path: Path, recorded_tick: tuple[NodeSample, Attribution]) -> None:
    line = encode_tick(*recorded_tick)
    assert line["sample"]["gpus"][0]["instances"] and line["sample"]["gpus"][0]["mig_enabled"] is True
    jsonschema.Draft202012Validator(schema()).validate(line)
    without_instances = {"index": 3, "uuid": "GPU-3", "name": "g", "mig_enabled": False, "instances": []}
    jsonschema.Draft202012Validator(schema()).validate({**line, "sample": {"gpus": [without_instances]}})


def test_external_signals_are_written_and_read_back(tmp_path: Path,
                                                    recorded_tick: tuple[NodeSample, Attribution]) -> None:
    sample, attribution = recorded_tick
    later = NodeSample(node=sample.node, tick=sample.tick + 1, timestamp=sample.timestamp + 1, gpus=sample.gpus)
    path = tmp_path / "s.jsonl"
    with TraceWriter(path, header=TraceHeader(node="node-a", tick_seconds=1.0, started=5.0)) as writer:
        writer.write(sample, attribution, {"ml/trainer-0": 0.125})
        writer.write(later, attribution)
    first, second = read_trace(path)
    assert dict(first.external_signals) == {"ml/trainer-0": 0.125}
    assert second.external_signals is None
