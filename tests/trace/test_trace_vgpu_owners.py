"""Traces carry who owns each vGPU (Attribution.vgpus), so a replay names the same VMs' launcher pods the agent did;
a trace written before the field reads as "no vGPU joined to a VMI"."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import MappingProxyType

import pytest

from watchdog.model import EMPTY, PodRef, VgpuOwner
from watchdog.trace import TraceHeader, TraceWriter, read_trace
from watchdog.trace.codec import decode_attribution, decode_tick, encode_attribution

from tests.trace.conftest import make_tick

OWNERS = MappingProxyType({
    "VGPU-1": VgpuOwner("team-a", "infer-vm", PodRef("team-a", "virt-launcher-infer-vm-x1", uid="u-1")),
    "VGPU-2": VgpuOwner("team-b", "stopped-vm", None),  # a VMI with no live launcher pod here
})


def write(path: Path, ticks, *, version: int = 2) -> Path:
    with TraceWriter(path, header=TraceHeader(node="node-a", tick_seconds=1.0, started=0.0, version=version)) as out:
        for sample, attribution in ticks:
            out.write(sample, attribution)
    return path


def test_the_codec_round_trip_is_exact_and_leaves_it_out_without_vgpus():
    _, attribution = make_tick()
    owned = dataclasses.replace(attribution, vgpus=OWNERS)
    encoded = encode_attribution(owned)
    assert encoded["vgpus"]["VGPU-2"] == {"namespace": "team-b", "vmi": "stopped-vm"}
    assert encoded["vgpus"]["VGPU-1"]["pod"]["name"] == "virt-launcher-infer-vm-x1"
    assert decode_attribution(json.loads(json.dumps(encoded))) == owned
    assert "vgpus" not in encode_attribution(attribution)
    assert decode_attribution(encode_attribution(attribution)).vgpus is EMPTY


@pytest.mark.parametrize("version", [1, 2])
def test_a_written_trace_reads_back_the_same_owners(tmp_path: Path, version: int):
    sample, attribution = make_tick()
    path = write(tmp_path / "t.jsonl", [(sample, dataclasses.replace(attribution, vgpus=OWNERS))], version=version)
    assert list(read_trace(path))[0].attribution.vgpus == OWNERS


def test_version_2_writes_the_attribution_again_when_only_the_owners_changed(tmp_path: Path):
    sample, attribution = make_tick()
    later = dataclasses.replace(sample, tick=sample.tick + 1, timestamp=sample.timestamp + 1)
    owned = dataclasses.replace(attribution, vgpus=OWNERS)
    path = write(tmp_path / "t.jsonl", [(sample, attribution), (later, owned)])
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    assert ["attribution" in line for line in lines] == [True, True]
    assert [r.attribution.vgpus for r in read_trace(path)] == [EMPTY, OWNERS]


def test_a_hand_written_line_may_name_the_launcher_pod_as_namespace_and_name():
    line = {"tick": 0, "timestamp": 0.0, "sample": {"node": "n1", "gpus": []},
            "attribution": {"healthy": True, "vgpus": {"VGPU-1": {"namespace": "team-a", "vmi": "infer-vm",
                                                                   "pod": "team-a/virt-launcher-infer-vm-x1"}}}}
    [(uuid, owner)] = decode_tick(line)[1].vgpus.items()
    assert uuid == "VGPU-1" and owner.pod is not None and owner.pod.key == "team-a/virt-launcher-infer-vm-x1"
