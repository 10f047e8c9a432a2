"""In the test bed a LiveMigrate VM's launcher eviction moves the VM off the node: KubeVirt's migration runs a step a
tick, the VMI ends up on another node, and the simulated GPU stops serving the VM's vGPU. `kubectl get vmim -A`
shows the migration as KubeVirt's CRD prints it."""

from __future__ import annotations

from watchdog.kube.eviction import KubeEvictions
from watchdog.model import EvictionResult as R
from watchdog.model import PodRef
from watchdog.testbed.cluster.apiserver_store import VMI_MIGRATIONS, VMIS
from watchdog.testbed.world import SimulatedWorld
from tests.testbed.cluster.test_kubectl import Kubectl

SCENARIO = {"name": "vgpu-migration", "node": "gpu-node-1", "gpus": [{"model": "A100-SXM4-40GB", "vgpu": {"vms": [
    {"name": "vm-a", "namespace": "ml", "type": "GRID A100-10C"},
    {"name": "vm-b", "namespace": "ml", "eviction_strategy": "None", "type": "GRID A100-10C"}]}}]}


def served(world) -> set[str]:
    nvml = world.nvml
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    return {nvml.nvmlVgpuInstanceGetVmID(i)[0] for i in nvml.nvmlDeviceGetActiveVgpus(handle)}


async def test_a_migrated_vm_leaves_the_simulated_gpu(tmp_path, fake_api):
    async with SimulatedWorld(SCENARIO, workdir=tmp_path / "world") as world:
        world.nvml.nvmlInit()
        vmis = {v["metadata"]["name"]: v for v in world.api.store.list(VMIS)}
        uuid_a = vmis["vm-a"]["spec"]["domain"]["firmware"]["uuid"]
        assert uuid_a in served(world) and len(served(world)) == 2
        (pod,) = [p for p in world.api.objects("pods", "ml") if p["metadata"]["name"].startswith("virt-launcher-vm-a")]
        api = await fake_api.client(world.api)
        reply = await KubeEvictions(api).evict(PodRef("ml", pod["metadata"]["name"]), dry_run=False)
        assert reply.result is R.MIGRATING
        kubectl = Kubectl(world.api.write_kubeconfig(tmp_path / "kubeconfig"), tmp_path)
        rows = (await kubectl.ok("get", "vmim", "-A")).splitlines()
        assert rows[0].split() == ["NAMESPACE", "NAME", "PHASE", "VMI"]
        assert rows[1].split()[2:] == ["Pending", "vm-a"] and rows[1].split()[1].startswith("kubevirt-evacuation-")
        world.advance(world.scenario.tick_seconds)  # Running
        assert uuid_a in served(world)
        world.advance(world.scenario.tick_seconds)  # Succeeded: the VM runs elsewhere
        (vmim,) = world.api.store.list(VMI_MIGRATIONS)
        assert vmim["status"]["phase"] == "Succeeded"
        assert world.api.store.get(VMIS, "ml", "vm-a")["status"]["nodeName"] != "gpu-node-1"
        assert uuid_a not in served(world) and len(served(world)) == 1
        assert "Succeeded" in (await kubectl.ok("get", "vmim", "-n", "ml"))
        world.nvml.nvmlShutdown()
