"""A vGPU host GPU's vGPUs survive a trace in both line versions; a GPU that is no vGPU host writes neither key."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from watchdog.evaluation import simulate
from watchdog.testbed.profiles import vgpu_type
from watchdog.trace import TraceHeader, TraceWriter, read_trace, schema

SCENARIO = {
    "name": "vgpu-host", "seed": 3, "duration_ticks": 5,
    "gpus": [
        {"model": "H100-80GB-HBM3", "vgpu": {"scheduler": "fixed_share", "vms": [
            {"name": "vm-a", "type": "NVIDIA H100-20C", "sm": {"base": 0.7}, "memory": {"base": "12Gi"}},
            {"name": "vm-b", "type": "NVIDIA H100-20C", "start_tick": 2, "dram": {"base": 0.1}}]}},
        {"model": "H100-80GB-HBM3"},
    ],
}


@pytest.fixture(scope="module")
def ticks() -> list:
    return list(simulate(SCENARIO))


@pytest.mark.parametrize("version", [1, 2])
def test_vgpus_round_trip_and_validate(tmp_path: Path, ticks: list, version: int) -> None:
    path = tmp_path / "vgpu.jsonl"
    with TraceWriter(path, header=TraceHeader(node="sim-node-1", tick_seconds=1.0, started=0.0,
                                              version=version)) as writer:
        for sample, attribution in ticks:
            writer.write(sample, attribution)
    records = list(read_trace(path))
    assert [r.sample.gpus for r in records] == [s.gpus for s, _ in ticks]
    last = records[-1].sample.gpus
    assert len(last[0].vgpus) == 2 and last[0].vgpu_scheduler == "fixed_share"
    # fixed_share holds vm-a (asking 0.7) to 1/(the most H100-20C vGPUs a GPU holds) of the GPU
    cap = 1 / vgpu_type("H100-80GB-HBM3", "NVIDIA H100-20C").max_instances
    assert last[0].vgpus[0].fb_used_bytes == 12 << 30 and last[0].vgpus[0].sm_util == pytest.approx(cap, abs=0.01)
    # the scheduler's state and the runlists of its log (read at the first tick) survive too
    assert last[0].vgpu_scheduler_arr == "enabled" and last[0].vgpu_timeslice_seconds
    assert records[0].sample.gpus[0].vgpu_runlists and all(r.slices > 0 for r in last[0].vgpu_runlists)
    validator = jsonschema.Draft202012Validator(schema())
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        validator.validate(line)
    plain = lines[-1]["sample"]["gpus"][1]
    assert not {"vgpus", "vgpu_scheduler", "vgpu_scheduler_arr", "vgpu_timeslice_seconds", "vgpu_runlists"} & set(plain)


def test_a_hand_written_vgpu_entry_needs_its_identity() -> None:
    entry = {"uuid": "u", "type_name": "GRID A100-4C", "vm_id": "vm", "vm_id_type": "uuid", "sm_util": 0.5}
    gpu = {"index": 0, "uuid": "GPU-a", "name": "g", "vgpus": [entry], "vgpu_scheduler": "best_effort"}
    sub = {"$ref": "#/$defs/gpu", "$defs": schema()["$defs"]}
    jsonschema.Draft202012Validator(sub).validate(gpu)
    for broken in ({**entry, "sm_util": 1.5}, {k: v for k, v in entry.items() if k != "vm_id"},
                   {**entry, "vm_id_type": "name"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.Draft202012Validator(sub).validate({**gpu, "vgpus": [broken]})
