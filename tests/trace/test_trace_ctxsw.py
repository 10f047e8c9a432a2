"""Context-switch readings (GPM GR0_CTXSW_*, NVML 12.9+) in traces: optional on GPUs and MIG devices, kept exactly by
both versions, left out of a version 2 line while unknown, and refused by the schema outside their range."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from watchdog.model import Attribution, NodeSample
from watchdog.trace import TraceError, TraceHeader, TraceWriter, decode_tick, encode_tick, read_trace


def with_switching(sample: NodeSample) -> NodeSample:
    mig_gpu, shared_gpu, lost_gpu = sample.gpus
    mig = dataclasses.replace(mig_gpu.instances[0], ctxsw_active=0.0625, ctxsw_per_second=1500.0)
    return dataclasses.replace(sample, gpus=(
        dataclasses.replace(mig_gpu, instances=(mig,)),
        dataclasses.replace(shared_gpu, ctxsw_active=0.03, ctxsw_per_second=999.5),
        lost_gpu,
    ))


def write(path: Path, ticks: list[tuple[NodeSample, Attribution]], *, version: int) -> Path:
    header = TraceHeader(node=ticks[0][0].node, tick_seconds=1.0, started=0.0, version=version)
    with TraceWriter(path, header=header) as writer:
        for sample, attribution in ticks:
            writer.write(sample, attribution)
    return path


@pytest.mark.parametrize("version", [1, 2])
def test_switching_readings_round_trip_in_both_versions(
    tmp_path: Path, recorded_tick: tuple[NodeSample, Attribution], version: int
) -> None:
    sample, attribution = recorded_tick
    switching = with_switching(sample)
    later = dataclasses.replace(sample, tick=sample.tick + 1, timestamp=sample.timestamp + 1)  # readings unknown
    path = write(tmp_path / f"v{version}.jsonl", [(switching, attribution), (later, attribution)], version=version)

    records = list(read_trace(path))

    assert [r.sample for r in records] == [switching, later]
    assert records[0].sample.gpus[1].ctxsw_per_second == 999.5
    assert isinstance(records[0].sample.gpus[0].instances[0].ctxsw_per_second, float)


def test_version_2_leaves_unknown_readings_out_and_a_line_without_them_reads_as_unknown(
    tmp_path: Path, recorded_tick: tuple[NodeSample, Attribution]
) -> None:
    sample, attribution = recorded_tick
    path = write(tmp_path / "v2.jsonl", [(sample, attribution)], version=2)
    line = json.loads(path.read_text().splitlines()[1])
    assert not [key for gpu in line["sample"]["gpus"] for key in gpu if key.startswith("ctxsw")]
    decoded, _ = decode_tick(line, node=sample.node)
    assert decoded.gpus[1].ctxsw_active is None and decoded.gpus[0].instances[0].ctxsw_per_second is None


def test_version_1_writes_both_fields_on_every_gpu_and_mig_device(
    recorded_tick: tuple[NodeSample, Attribution]
) -> None:
    sample, attribution = recorded_tick
    data = encode_tick(with_switching(sample), attribution)
    gpus = data["sample"]["gpus"]
    assert (gpus[1]["ctxsw_active"], gpus[1]["ctxsw_per_second"]) == (0.03, 999.5)
    assert (gpus[0]["instances"][0]["ctxsw_active"], gpus[0]["instances"][0]["ctxsw_per_second"]) == (0.0625, 1500.0)
    assert gpus[2]["ctxsw_active"] is None


@pytest.mark.parametrize(
    ("where", "field", "value", "message"),
    [
        ("gpu", "ctxsw_active", 3.0, "3.0 is greater than the maximum of 1"),
        ("gpu", "ctxsw_per_second", -1.0, "-1.0 is less than the minimum of 0"),
        ("mig", "ctxsw_active", -0.5, "-0.5 is less than the minimum of 0"),
        ("mig", "ctxsw_per_second", "many", "'many' is not of type 'number', 'null'"),
    ],
)
def test_the_schema_refuses_a_reading_outside_its_range(
    tmp_path: Path, recorded_tick: tuple[NodeSample, Attribution], where: str, field: str, value: object,
    message: str,
) -> None:
    sample, attribution = recorded_tick
    path = write(tmp_path / "bad.jsonl", [(sample, attribution)], version=1)
    header, line = path.read_text().splitlines()
    data = json.loads(line)
    target = data["sample"]["gpus"][0]["instances"][0] if where == "mig" else data["sample"]["gpus"][1]
    target[field] = value
    path.write_text(header + "\n" + json.dumps(data) + "\n")
    with pytest.raises(TraceError) as refused:
        list(read_trace(path))
    assert field in str(refused.value) and message in str(refused.value)
