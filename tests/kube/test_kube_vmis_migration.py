"""What the VMI list tells the action rules: the eviction strategy KubeVirt will apply (the VMI's, else the KubeVirt
CR's default, read over HTTP), whether the VM can live-migrate, whether a migration is under way, and whether it
holds a whole GPU by passthrough."""

from __future__ import annotations

import pytest

from watchdog.kube.vmis import NodeVmis, vmi_info
from watchdog.model.vms import is_vgpu_resource
from watchdog.testbed.cluster.apiserver_store import KUBEVIRTS, VMIS


def vmi(name: str = "vm-a", *, strategy: str | None = None, conditions=(), devices=None, **status) -> dict:
    spec: dict = {"domain": {"devices": devices or {"gpus": [{"name": "g", "deviceName": "nvidia.com/GRID_A100_4C"}]}}}
    if strategy:
        spec["evictionStrategy"] = strategy
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                         "labels": {"kubevirt.io/nodeName": "gpu-1"}},
            "spec": spec,
            "status": {"phase": "Running", "nodeName": "gpu-1",
                       "conditions": [{"type": t, "status": s} for t, s in conditions], **status}}


def test_strategy_condition_and_devices():
    info = vmi_info(vmi(strategy="LiveMigrate", conditions=[("LiveMigratable", "True")]))
    assert (info.eviction_strategy, info.strategy_from_cluster, info.live_migratable) == ("LiveMigrate", False, True)
    assert info.vgpu_resources == ("nvidia.com/GRID_A100_4C",) and info.passthrough == ()
    assert not info.migrating and info.migration_end == ""
    assert not vmi_info(vmi(conditions=[("LiveMigratable", "False")])).live_migratable


def test_the_cluster_default_fills_an_unset_strategy_only():
    assert vmi_info(vmi(), cluster_strategy="LiveMigrate").strategy_from_cluster
    assert vmi_info(vmi(strategy="None"), cluster_strategy="LiveMigrate").eviction_strategy == "None"
    assert vmi_info(vmi()).eviction_strategy == ""


def test_migration_state():
    running = vmi_info(vmi(migrationState={"startTimestamp": "2026-12-02T04:00:00Z"}))
    assert running.migrating and running.migration_end == ""
    ended = vmi_info(vmi(migrationState={"startTimestamp": "2026-12-02T04:00:00Z",
                                         "endTimestamp": "2026-12-02T04:01:00Z", "completed": True}))
    assert not ended.migrating and ended.migration_end == "2026-12-02T04:01:00Z"
    assert vmi_info(vmi(evacuationNodeName="gpu-1")).migrating  # marked by an eviction, the migration not created yet


def test_passthrough_is_a_whole_gpu():
    info = vmi_info(vmi(devices={"hostDevices": [{"name": "h", "deviceName": "nvidia.com/GH100_H200_SXM_141GB"}],
                                 "gpus": [{"name": "g", "deviceName": "nvidia.com/NVIDIA_A100_4C"}]}))
    assert info.passthrough == ("nvidia.com/GH100_H200_SXM_141GB",) and info.vgpu_resources == (
        "nvidia.com/NVIDIA_A100_4C",)
    assert is_vgpu_resource("nvidia.com/GRID_T4_1Q") and not is_vgpu_resource("example.com/GRID_T4_1Q")


async def test_the_reader_takes_the_default_from_the_kubevirt_cr(server, api):
    server.store.create(VMIS, vmi("vm-a"))
    server.store.create(VMIS, vmi("vm-b", strategy="None"))
    server.store.create(KUBEVIRTS, {"metadata": {"name": "kubevirt", "namespace": "kubevirt"},
                                    "spec": {"configuration": {"evictionStrategy": "LiveMigrate"}}})
    reader = NodeVmis(api, node="gpu-1")
    assert await reader.read()
    by_name = {v.name: v for v in reader.vmis}
    assert by_name["vm-a"].eviction_strategy == "LiveMigrate" and by_name["vm-a"].strategy_from_cluster
    assert by_name["vm-b"].eviction_strategy == "None"


async def test_an_unreadable_kubevirt_cr_leaves_the_strategy_unset(server, api):
    server.store.create(VMIS, vmi("vm-a"))
    reader = NodeVmis(api, node="gpu-1")
    server.fail_next(1, status=403, path_prefix="/apis/kubevirt.io/v1/kubevirts")
    assert await reader.read() and reader.vmis[0].eviction_strategy == ""
    server.fail_next(1, status=503, path_prefix="/apis/kubevirt.io/v1/kubevirts")
    assert not await reader.read() and reader.error_counts() == {"vmis_unavailable": 1}  # the last list is kept


@pytest.mark.parametrize("part,field,value", [
    ("status", "migrationState", ["not", "an", "object"]), ("spec", "domain", "q35")])
async def test_a_malformed_vmi_is_left_out_and_the_others_stay_current(server, api, part, field, value):
    # One VMI of the wrong shape must not freeze the whole list at its last good version: the others' migration
    # state is what the action rules act on. The malformed one is not listed, so its launcher pod is never a candidate.
    server.store.create(VMIS, vmi("vm-a", strategy="LiveMigrate", conditions=[("LiveMigratable", "True")]))
    reader = NodeVmis(api, node="gpu-1")
    assert await reader.read()
    bad = vmi("vm-b")
    bad[part][field] = value
    server.store.create(VMIS, bad)
    marked = server.store.get(VMIS, "ml", "vm-a")
    marked["status"]["evacuationNodeName"] = "gpu-1"
    server.store.update(VMIS, marked)
    assert await reader.read()
    assert [(v.name, v.migrating) for v in reader.vmis] == [("vm-a", True)]
    assert reader.error_counts() == {"vmis_malformed": 1}


def test_vmi_info_refuses_a_wrong_shape_with_value_error():
    bad = vmi()
    bad["spec"] = ["not", "an", "object"]
    with pytest.raises(ValueError):
        vmi_info(bad)
