"""Traces carry each shared GPU's replicas and strategy, so a replay gives detection the MPS limits the agent had."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import MappingProxyType

import pytest

from watchdog.evaluation import simulate
from watchdog.model import EMPTY, DeviceSharing
from watchdog.trace import TraceHeader, TraceWriter, read_trace
from watchdog.trace.codec import decode_attribution, decode_tick, encode_attribution

from tests.trace.conftest import make_tick

SHARED = MappingProxyType({"GPU-1111": DeviceSharing(4, "mps", "kubelet+labels"),
                           "GPU-2222": DeviceSharing(2, "time-slicing", "policy")})
SCENARIO = {
    "name": "mps-replicas", "seed": 5, "duration_ticks": 4,
    "gpus": [{"model": "H100-80GB-HBM3", "mps": True, "replicas": 4}],
    "pods": [
        {"namespace": "team-a", "name": "train", "device": {"gpu": 0}, "workload": {"sm": {"base": 0.4}}},
        {"namespace": "team-b", "name": "infer", "device": {"gpu": 0}, "workload": {"sm": {"base": 0.3}}},
    ],
}


def write(path: Path, ticks, *, version: int = 2, node: str = "node-a") -> Path:
    header = TraceHeader(node=node, tick_seconds=1.0, started=0.0, version=version)
    with TraceWriter(path, header=header) as writer:
        for sample, attribution in ticks:
            writer.write(sample, attribution)
    return path


def test_the_codec_round_trip_is_exact_and_leaves_it_out_when_nothing_is_shared():
    _, attribution = make_tick()
    shared = dataclasses.replace(attribution, sharing=SHARED)
    encoded = encode_attribution(shared)
    assert encoded["sharing"] == {"GPU-1111": {"replicas": 4, "strategy": "mps", "source": "kubelet+labels"},
                                  "GPU-2222": {"replicas": 2, "strategy": "time-slicing", "source": "policy"}}
    assert decode_attribution(json.loads(json.dumps(encoded))) == shared
    assert "sharing" not in encode_attribution(attribution)
    assert decode_attribution(encode_attribution(attribution)).sharing is EMPTY


@pytest.mark.parametrize("version", [1, 2])
def test_a_written_trace_reads_back_the_same_sharing(tmp_path: Path, version: int):
    sample, attribution = make_tick()
    ticks = [(sample, dataclasses.replace(attribution, sharing=SHARED))]
    records = list(read_trace(write(tmp_path / "t.jsonl", ticks, version=version)))
    assert records[0].attribution.sharing == SHARED


def test_version_2_writes_the_attribution_again_when_only_the_sharing_changed(tmp_path: Path):
    sample, attribution = make_tick()
    later = dataclasses.replace(sample, tick=sample.tick + 1, timestamp=sample.timestamp + 1)
    last = dataclasses.replace(sample, tick=sample.tick + 2, timestamp=sample.timestamp + 2)
    shared = dataclasses.replace(attribution, sharing=SHARED)
    path = write(tmp_path / "t.jsonl", [(sample, attribution), (later, shared), (last, shared)])
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    assert ["attribution" in line for line in lines] == [True, True, False]
    assert "sharing" not in lines[0]["attribution"] and lines[1]["attribution"]["sharing"]["GPU-1111"]["replicas"] == 4
    assert [r.attribution.sharing for r in read_trace(path)] == [EMPTY, SHARED, SHARED]


def test_a_hand_written_line_names_replicas_and_perhaps_the_strategy(tmp_path: Path):
    line = {"tick": 0, "timestamp": 0.0, "sample": {"node": "n1", "gpus": []},
            "attribution": {"healthy": True, "sharing": {"GPU-a": {"replicas": 4, "strategy": "mps"},
                                                         "GPU-b": {"replicas": 3}}}}
    assert dict(decode_tick(line)[1].sharing) == {"GPU-a": DeviceSharing(4, "mps", "trace"),
                                                   "GPU-b": DeviceSharing(3, "unknown", "trace")}
    path = write(tmp_path / "hand.jsonl", [], node="n1")
    path.write_text(path.read_text() + json.dumps(line) + "\n")
    assert list(read_trace(path))[0].attribution.sharing["GPU-a"].memory_limit_bytes(80 << 30) == 20 << 30


@pytest.mark.parametrize("entry", [{"replicas": 0}, {"replicas": 4, "strategy": "MIG"}, {"strategy": "mps"},
                                   {"replicas": 4, "limit": 1}, {"replicas": "4"}])
def test_a_bad_entry_is_refused_naming_the_field(tmp_path: Path, entry: dict):
    line = {"tick": 0, "timestamp": 0.0, "sample": {"node": "n1", "gpus": []},
            "attribution": {"healthy": True, "sharing": {"GPU-a": entry}}}
    path = write(tmp_path / "bad.jsonl", [], node="n1")
    path.write_text(path.read_text() + json.dumps(line) + "\n")
    with pytest.raises(ValueError, match="sharing"):
        list(read_trace(path))


def test_a_recorded_simulation_keeps_its_mps_gpu(tmp_path: Path):
    ticks = list(simulate(SCENARIO))
    records = list(read_trace(write(tmp_path / "sim.jsonl.gz", ticks, node=ticks[0][0].node)))
    assert [r.attribution.sharing for r in records] == [a.sharing for _, a in ticks]
    [(uuid, sharing)] = records[-1].attribution.sharing.items()
    assert uuid == records[-1].sample.gpus[0].uuid and sharing == DeviceSharing(4, "mps", "kubelet+labels")
