"""Each vGPU of a vGPU host attributed to its KubeVirt VMI and virt-launcher pod: the pure join, and the same
answer from the evaluation path as from the agent's sources."""

from __future__ import annotations

from watchdog.attribution.vgpus import vgpu_owners
from watchdog.evaluation.scenario_run import simulate
from watchdog.model import GpuSample, NodeSample, PodIndex, PodInfo, PodRef, VgpuOwner, VgpuSample, VmiInfo

VM_A, VM_B = "5B1C7A9E-0000-4000-8000-0000000000AA", "5b1c7a9e-0000-4000-8000-0000000000bb"


def _sample(*vgpus: VgpuSample, node: str = "gpu-1") -> NodeSample:
    gpu = GpuSample(index=0, uuid="GPU-host", name="NVIDIA A100-SXM4-40GB", memory_total_bytes=40 << 30, vgpus=vgpus)
    return NodeSample(node=node, tick=0, timestamp=0.0, gpus=(gpu,))


def _vgpu(uuid: str, vm_id: str, vm_id_type: str = "uuid") -> VgpuSample:
    return VgpuSample(uuid=uuid, type_name="GRID A100-10C", vm_id=vm_id, vm_id_type=vm_id_type)


def _launcher(name: str, vmi_uid: str, *, node: str = "gpu-1", phase: str = "Running",
              namespace: str = "ml") -> PodInfo:
    return PodInfo(uid=f"pod-{name}", namespace=namespace, name=name, node=node, phase=phase,
                   labels={"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": vmi_uid})


VMIS = (VmiInfo(namespace="ml", name="vm-a", uid="uid-a", firmware_uuid=VM_A.lower(), node="gpu-1"),
        VmiInfo(namespace="ml", name="vm-b", uid="uid-b", firmware_uuid=VM_B, node="gpu-1"))


def test_each_vgpu_maps_to_its_vmi_and_launcher_pod():
    index = PodIndex.of([_launcher("virt-launcher-vm-a-x1", "uid-a"),
                         _launcher("virt-launcher-vm-b-old", "uid-b", node="gpu-2"),  # migration source elsewhere
                         PodInfo(uid="p", namespace="ml", name="plain", labels={"kubevirt.io/created-by": "uid-b"})])
    owners = vgpu_owners(_sample(_vgpu("v-a", VM_A), _vgpu("v-b", VM_B)), VMIS, index)
    assert owners["v-a"] == VgpuOwner(namespace="ml", vmi="vm-a",
                                      pod=PodRef("ml", "virt-launcher-vm-a-x1", "pod-virt-launcher-vm-a-x1"))
    assert owners["v-b"] == VgpuOwner(namespace="ml", vmi="vm-b", pod=None)  # its pod here is not listed (yet)


def test_unknown_vms_domain_ids_and_dead_pods_stay_unattributed():
    index = PodIndex.of([_launcher("virt-launcher-vm-a-x1", "uid-a", phase="Succeeded")])
    owners = vgpu_owners(_sample(_vgpu("v-a", VM_A), _vgpu("v-x", "00000000-0000-4000-8000-000000000000"),
                                 _vgpu("v-xen", VM_B, "domain_id")), VMIS, index)
    assert dict(owners) == {"v-a": VgpuOwner(namespace="ml", vmi="vm-a", pod=None)}
    assert not vgpu_owners(_sample(_vgpu("v-a", VM_A)), (), index)


def test_the_evaluation_path_attributes_vgpus_as_the_agent_does():
    scenario = {"name": "vgpu-eval", "node": "gpu-node-1", "duration_ticks": 3, "gpus": [
        {"model": "A100-SXM4-40GB", "vgpu": {"vms": [
            {"name": "vm-a", "namespace": "ml", "type": "GRID A100-10C", "sm": {"base": 0.5}},
            {"name": "vm-b", "type": "GRID A100-10C", "start_tick": 2}]}}]}
    ticks = list(simulate(scenario))
    first = ticks[0][1].vgpus
    assert [(o.namespace, o.vmi) for o in first.values()] == [("ml", "vm-a")]
    (owner,) = first.values()
    assert owner.pod is not None and owner.pod.name.startswith("virt-launcher-vm-a-")
    last_sample, last = ticks[-1]
    assert len(last_sample.gpus[0].vgpus) == 2
    assert sorted((o.namespace, o.vmi) for o in last.vgpus.values()) == [("default", "vm-b"), ("ml", "vm-a")]
