"""A vGPU host's VMs appear in the fake API server as KubeVirt would show them: a VMI whose firmware UUID is the VM
id NVML reports, and its virt-launcher pod on the node."""

from __future__ import annotations

import pytest

from watchdog.testbed.cluster.apiserver_store import VMIS
from watchdog.testbed.scenario import ScenarioError, load_scenario
from watchdog.testbed.world import SimulatedWorld

SCENARIO = {"name": "vgpu-vms", "node": "gpu-node-1", "gpus": [{"model": "A100-SXM4-40GB", "vgpu": {"vms": [
    {"name": "vm-a", "namespace": "ml", "priority": 500, "eviction_strategy": "None", "type": "GRID A100-10C",
     "end_tick": 2},
    {"name": "vm-b", "type": "GRID A100-10C"}]}}]}


async def test_each_vm_is_a_vmi_with_its_launcher_pod(tmp_path):
    async with SimulatedWorld(SCENARIO, workdir=tmp_path / "world") as world:
        nvml = world.nvml
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        vm_ids = {nvml.nvmlVgpuInstanceGetVmID(i)[0] for i in nvml.nvmlDeviceGetActiveVgpus(handle)}
        vmis = {v["metadata"]["name"]: v for v in world.api.store.list(VMIS)}
        assert {v["spec"]["domain"]["firmware"]["uuid"] for v in vmis.values()} == vm_ids and len(vm_ids) == 2
        a = vmis["vm-a"]
        assert a["metadata"]["namespace"] == "ml" and a["spec"]["evictionStrategy"] == "None"
        assert a["metadata"]["labels"] == {"kubevirt.io/nodeName": "gpu-node-1"}
        assert (a["status"]["phase"], a["status"]["nodeName"]) == ("Running", "gpu-node-1")
        assert vmis["vm-b"]["metadata"]["namespace"] == "default"
        (pod,) = [p for p in world.api.objects("pods", "ml") if p["metadata"]["name"].startswith("virt-launcher-vm-a-")]
        labels = pod["metadata"]["labels"]
        assert labels == {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": a["metadata"]["uid"],
                          "vm.kubevirt.io/name": "vm-a"}
        assert pod["spec"]["nodeName"] == "gpu-node-1" and pod["spec"]["priority"] == 500
        assert world.api.store.get(VMIS, "", "ml") is None  # namespaces exist for the VMs
        assert {n["metadata"]["name"] for n in world.api.objects("namespaces")} >= {"ml", "default"}
        world.advance(2 * world.scenario.tick_seconds)
        assert [v["metadata"]["name"] for v in world.api.store.list(VMIS)] == ["vm-b"]
        assert not [p for p in world.api.objects("pods", "ml") if p["metadata"]["name"].startswith("virt-launcher")]
        nvml.nvmlShutdown()


def test_vm_names_are_unique_across_gpus():
    vm = {"name": "vm-a", "type": "GRID A100-10C"}
    with pytest.raises((ScenarioError, ValueError), match="duplicate VM name"):
        load_scenario({"name": "dup", "gpus": [{"model": "A100-SXM4-40GB", "vgpu": {"vms": [vm]}},
                                               {"model": "A100-SXM4-40GB", "vgpu": {"vms": [vm]}}]})
