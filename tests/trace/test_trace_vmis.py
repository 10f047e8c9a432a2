"""The VMIs a trace carries come back as the action rules read them: what KubeVirt will do with each launcher's
eviction must be the same offline (replay, what-if) as it was live."""

from __future__ import annotations

import json

from watchdog.model import Attribution, VmiInfo
from watchdog.trace.codec import decode_attribution, encode_attribution

MIGRATES = VmiInfo(namespace="prod", name="serve-vm", uid="uid-1", firmware_uuid="4d0c9a52-6f1e-4b8e-9c3a-1a2b3c4d5e6f",
                   node="n1", phase="Running", eviction_strategy="LiveMigrate", live_migratable=True,
                   vgpu_resources=("nvidia.com/GRID_A100_10C",))
PASSTHROUGH = VmiInfo(namespace="batch", name="pt-vm", uid="uid-2", firmware_uuid="", eviction_strategy="None",
                      strategy_from_cluster=True, migrating=True, evacuation_node="n1",
                      migration_end="2026-12-01T10:00:00Z", passthrough=("nvidia.com/GA100_A100_SXM4_40GB",))


def test_vmis_survive_the_round_trip_through_json():
    attribution = Attribution(healthy=True, vmis={"uid-1": MIGRATES, "uid-2": PASSTHROUGH})
    line = json.loads(json.dumps(encode_attribution(attribution)))
    assert line["vmis"]["uid-1"] == {"namespace": "prod", "name": "serve-vm",
                                     "firmware_uuid": "4d0c9a52-6f1e-4b8e-9c3a-1a2b3c4d5e6f", "node": "n1",
                                     "phase": "Running", "eviction_strategy": "LiveMigrate", "live_migratable": True,
                                     "vgpu_resources": ["nvidia.com/GRID_A100_10C"]}
    assert dict(decode_attribution(line).vmis) == {"uid-1": MIGRATES, "uid-2": PASSTHROUGH}


def test_a_node_without_vmis_writes_none_and_an_old_trace_reads_as_none():
    line = encode_attribution(Attribution(healthy=True))
    assert "vmis" not in line
    assert dict(decode_attribution(line).vmis) == {}
    minimal = decode_attribution({"healthy": True, "vmis": {"u": {"namespace": "a", "name": "b"}}}).vmis["u"]
    assert minimal == VmiInfo(namespace="a", name="b", uid="u", firmware_uuid="")
