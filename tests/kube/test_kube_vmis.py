"""The node's KubeVirt VMIs, listed from the fake API server over real HTTP by their node label, and joined into
the agent's attribution stage."""

from __future__ import annotations

import pytest

from tests.attribution.stage_fakes import FixedKubelet, FixedProc
from watchdog.attribution.pods import PodCache
from watchdog.attribution.stage import NodeAttributor
from watchdog.kube.vmis import NodeVmis
from watchdog.model import GpuSample, NodeSample, PodInfo, VgpuSample, VmiInfo
from watchdog.testbed.cluster.apiserver_store import VMIS

FIRMWARE = "5b1c7a9e-0000-4000-8000-0000000000aa"


def _vmi(name: str, node: str, uuid: str = FIRMWARE) -> dict:
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": {"kubevirt.io/nodeName": node}},
            "spec": {"domain": {"firmware": {"uuid": uuid.upper()}}},
            "status": {"phase": "Running", "nodeName": node}}


async def test_lists_only_its_nodes_vmis(server, api):
    server.store.create(VMIS, _vmi("vm-a", "gpu-1"))
    server.store.create(VMIS, _vmi("vm-b", "gpu-2", "5b1c7a9e-0000-4000-8000-0000000000bb"))
    reader = NodeVmis(api, node="gpu-1")
    assert reader.vmis is None and await reader.read()
    assert reader.vmis == (VmiInfo(namespace="ml", name="vm-a", uid="uid-vm-a", firmware_uuid=FIRMWARE,
                                   node="gpu-1", phase="Running"),)
    (query,) = [q for _, path, q in server.requests if path.endswith("/virtualmachineinstances")]
    assert query.get("labelSelector") == "kubevirt.io/nodeName=gpu-1"


async def test_no_kubevirt_is_no_vmis_and_a_failure_keeps_the_last_list(server, api):
    reader = NodeVmis(api, node="gpu-1")
    server.fail_next(1, status=404, path_prefix="/apis/kubevirt.io")
    assert await reader.read() and reader.vmis == () and reader.error_counts() == {}
    server.store.create(VMIS, _vmi("vm-a", "gpu-1"))
    assert await reader.read() and len(reader.vmis) == 1
    server.fail_next(1, status=503, path_prefix="/apis/kubevirt.io")
    assert not await reader.read()
    assert len(reader.vmis) == 1 and reader.error_counts() == {"vmis_unavailable": 1}


def test_rejects_bad_settings():
    with pytest.raises(ValueError):
        NodeVmis(None, node="")  # type: ignore[arg-type]


class _Vmis:
    def __init__(self, vmis):
        self.vmis = vmis

    @property
    def fresh_vmis(self):
        return self.vmis

    def error_counts(self):
        return {}


def test_the_stage_joins_vgpus_to_the_listed_vmis():
    launcher = PodInfo(uid="pod-a", namespace="ml", name="virt-launcher-vm-a-x1", node="gpu-1",
                       labels={"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": "uid-vm-a"})
    vgpu = VgpuSample(uuid="v-a", type_name="GRID A100-10C", vm_id=FIRMWARE.upper(), vm_id_type="uuid")
    sample = NodeSample(node="gpu-1", tick=0, timestamp=0.0, gpus=(GpuSample(
        index=0, uuid="GPU-host", name="NVIDIA A100-SXM4-40GB", memory_total_bytes=40 << 30, vgpus=(vgpu,)),))
    vmis = _Vmis(None)
    attributor = NodeAttributor(kubelet=FixedKubelet(), pods=PodCache([launcher]), pods_ok=lambda: True,
                                proc=FixedProc({}), clock=lambda: 0.0, vmis=vmis)
    assert not attributor.attribute(sample, tenant_label=None).vgpus  # nothing listed yet: unattributed
    vmis.vmis = (VmiInfo(namespace="ml", name="vm-a", uid="uid-vm-a", firmware_uuid=FIRMWARE, node="gpu-1"),)
    owner = attributor.attribute(sample, tenant_label=None).vgpus["v-a"]
    assert (owner.namespace, owner.vmi, owner.pod.name) == ("ml", "vm-a", "virt-launcher-vm-a-x1")


async def test_a_list_that_stopped_refreshing_joins_vgpus_but_gives_the_action_rules_nothing(server, api):
    # A VM's migration state and migratability change; once the list fails, the last good one is a past the action
    # rules must not act on (a launcher pod is then never a candidate). A firmware UUID never changes: the vGPU →
    # VMI join keeps using it.
    launcher = PodInfo(uid="pod-a", namespace="ml", name="virt-launcher-vm-a-x1", node="gpu-1",
                       labels={"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": "uid-vm-a"})
    vgpu = VgpuSample(uuid="v-a", type_name="GRID A100-10C", vm_id=FIRMWARE, vm_id_type="uuid")
    sample = NodeSample(node="gpu-1", tick=0, timestamp=0.0, gpus=(GpuSample(
        index=0, uuid="GPU-host", name="NVIDIA A100-SXM4-40GB", memory_total_bytes=40 << 30, vgpus=(vgpu,)),))
    server.store.create(VMIS, _vmi("vm-a", "gpu-1"))
    reader = NodeVmis(api, node="gpu-1")
    attributor = NodeAttributor(kubelet=FixedKubelet(), pods=PodCache([launcher]), pods_ok=lambda: True,
                                proc=FixedProc({}), clock=lambda: 0.0, vmis=reader)
    assert await reader.read()
    fresh = attributor.attribute(sample, tenant_label=None)
    assert "uid-vm-a" in fresh.vmis and fresh.vgpus["v-a"].vmi == "vm-a"
    server.fail_next(1, status=503, path_prefix="/apis/kubevirt.io")
    assert not await reader.read()
    stale = attributor.attribute(sample, tenant_label=None)
    assert not stale.vmis and stale.vgpus["v-a"].vmi == "vm-a"
    assert await reader.read() and "uid-vm-a" in attributor.attribute(sample, tenant_label=None).vmis
