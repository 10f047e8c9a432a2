"""The plausibility gate on the offline path: a trace keeps what the gate refused, and reading one gates it again.

The edits below are the ones that, before the gate, made replay act on impossible readings: a time-sliced GPU's
memory used set to its total + 1 GiB for ticks 10–59 (a memory_pressure finding and a dry-run eviction of a pod
that did not grow), a MIG device given its neighbour's UUID (an unauthorized finding blaming the production pod).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from tests.sampling.plausibility_helpers import node, replace_gpu, replace_mig
from watchdog.config import Policy
from watchdog.evaluation import replay, simulate
from watchdog.model import Attribution
from watchdog.model.plausibility import PlausibilityGate
from watchdog.trace import TraceHeader, TraceWriter, read_trace

ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30
NOBODY = Attribution(healthy=True)


def record(scenario: str, path: Path, *, ticks: int) -> tuple[str, list[dict]]:
    """The scenario's first ticks as a version-1 trace (every field on every line): header text, tick lines."""
    header = TraceHeader(node="sim-node-1", tick_seconds=1.0, started=0.0, version=1)
    with TraceWriter(path, header=header) as writer:
        for sample, attribution in itertools.islice(simulate(str(ROOT / "scenarios" / scenario)), ticks):
            writer.write(sample, attribution)
    first, *lines = path.read_text().splitlines()
    return first, [json.loads(line) for line in lines]


def write(path: Path, header: str, lines: list[dict]) -> Path:
    path.write_text("\n".join([header, *(json.dumps(line) for line in lines)]) + "\n")
    return path


def decisions(report: dict) -> set[tuple[str, str, str]]:
    return {(e["namespace"], e["pod"], e["result"]) for e in report["evictions"]}


@pytest.mark.parametrize("name", ["gated.jsonl", "gated.jsonl.gz"])
@pytest.mark.parametrize("version", [1, 2])
def test_round_trip_keeps_rejected_quarantined_and_layout_generation(tmp_path: Path, name: str, version: int) -> None:
    gate = PlausibilityGate()
    samples = [gate.admit(replace_mig(node(1), 0, 1, sm_util=3.0)),
               gate.admit(replace_gpu(node(2, generation=5), 1, temperature_celsius=-2731.0)), gate.admit(node(3))]
    assert samples[0].rejected and samples[1].quarantined and samples[2].quarantined
    header = TraceHeader(node="n", tick_seconds=1.0, started=0.0, version=version)
    with TraceWriter(tmp_path / name, header=header) as writer:
        for sample in samples:
            writer.write(sample, NOBODY)
    assert [record.sample for record in read_trace(tmp_path / name)] == samples


def test_a_trace_without_the_new_fields_still_reads(tmp_path: Path) -> None:
    header = {"format": "gpu-watchdog-trace", "version": 2, "node": "n", "tick_seconds": 1.0, "started": 0.0,
              "agent_version": "0.1"}
    line = {"tick": 0, "timestamp": 1.0, "sample": {"gpus": [{"index": 0, "uuid": "GPU-0", "name": "x"}]},
            "attribution": {"healthy": True}}
    (sample,) = [record.sample for record in read_trace(write(tmp_path / "old.jsonl", json.dumps(header), [line]))]
    assert (sample.rejected, sample.quarantined, sample.layout_generation) == ((), frozenset(), 0)


@pytest.fixture(scope="module")
def memory_pressure(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """The shipped time-slice memory scenario, clean and with memory used = total + 1 GiB at ticks 10–59."""
    out = tmp_path_factory.mktemp("memory")
    header, lines = record("memory-pressure-timeslice.yaml", out / "clean.jsonl", ticks=240)
    (position, uuid), = [(i, g["uuid"]) for i, g in enumerate(lines[0]["sample"]["gpus"]) if not g["mig_enabled"]]
    for line in lines:
        if 10 <= line["tick"] <= 59:
            gpu = line["sample"]["gpus"][position]
            gpu["memory_used_bytes"] = gpu["memory_total_bytes"] + GIB
    return out / "clean.jsonl", write(out / "edited.jsonl", header, lines), uuid


def test_an_edited_trace_is_gated_on_read(memory_pressure: tuple[Path, Path, str]) -> None:
    _, edited, uuid = memory_pressure
    records = {record.tick: record.sample for record in read_trace(edited)}
    for tick in (10, 59):
        (rejection,) = records[tick].rejected
        assert (rejection.check, rejection.device, rejection.field) == ("memory", uuid, "memory_used_bytes")
        gpu = next(g for g in records[tick].gpus if g.uuid == uuid)
        assert gpu.memory_used_bytes is None and gpu.memory_total_bytes is None
    assert uuid in records[69].quarantined and uuid not in records[70].quarantined  # 10 clean ticks
    assert records[9].rejected == () and records[9].quarantined == frozenset()


def test_replay_of_the_edited_memory_trace_decides_as_the_clean_one(memory_pressure: tuple[Path, Path, str]) -> None:
    clean, edited, _ = memory_pressure
    before, after = replay(clean, policy=Policy()), replay(edited, policy=Policy())
    assert after["evictions"] == before["evictions"] and after["findings"] == before["findings"]
    assert all(e["tick"] >= 100 for e in after["evictions"])  # nothing at tick 40: batch/grow did not grow then


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[dict]]:
    out = tmp_path_factory.mktemp("demo")
    header, lines = record("demo.yaml", out / "clean.jsonl", ticks=200)
    return out / "clean.jsonl", header, lines


@pytest.mark.parametrize("edit", ["mig_uuid", "gpu_uuid"])
def test_duplicated_uuids_in_a_trace_create_no_decision(demo, tmp_path: Path, edit: str) -> None:
    clean, header, lines = demo
    lines = json.loads(json.dumps(lines))
    for line in lines:
        if 20 <= line["tick"] < 90:
            gpus = line["sample"]["gpus"]
            if edit == "mig_uuid":  # instance 2 of GPU 0 wears instance 1's UUID for 70 ticks
                gpus[0]["instances"][2]["uuid"] = gpus[0]["instances"][1]["uuid"]
            else:
                gpus[1]["uuid"] = gpus[0]["uuid"]
    edited = write(tmp_path / "edited.jsonl", header, lines)
    records = {record.tick: record.sample for record in read_trace(edited)}
    assert records[19].rejected == () and {r.check for r in records[20].rejected} == {"identity"}
    after = replay(edited, policy=Policy())
    assert decisions(after) <= decisions(replay(clean, policy=Policy()))
    assert ("ml-prod", "inference-0", "dry_run") not in decisions(after)


def test_segments_read_with_one_gate_share_its_quarantine(tmp_path: Path) -> None:
    header = TraceHeader(node="n", tick_seconds=1.0, started=0.0)
    with TraceWriter(tmp_path / "a.jsonl", header=header) as writer:
        writer.write(replace_gpu(node(1), 1, temperature_celsius=-2731.0), NOBODY)  # written as an edit would
    with TraceWriter(tmp_path / "b.jsonl", header=header) as writer:
        writer.write(node(2), NOBODY)
    gate = PlausibilityGate()
    shared = [r.sample for path in ("a.jsonl", "b.jsonl") for r in read_trace(tmp_path / path, gate=gate)]
    alone = [r.sample for r in read_trace(tmp_path / "b.jsonl")]
    assert "GPU-1" in shared[0].quarantined and "GPU-1" in shared[1].quarantined
    assert alone[0].quarantined == frozenset()
