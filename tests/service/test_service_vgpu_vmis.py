"""The wired agent on a simulated vGPU host: the VMIs it lists and the launcher pods it watches name each vGPU's
owner in the tick's attribution and on the per-vGPU series, as the evaluation path does."""

from __future__ import annotations

import asyncio

from watchdog.evaluation.scenario_run import simulate
from watchdog.kube.client import KubeApi
from watchdog.service.agent import Agent
from watchdog.testbed.world import SimulatedWorld

SCENARIO = {"name": "vgpu-vmis", "node": "gpu-node-1", "duration_ticks": 2, "gpus": [
    {"model": "A100-SXM4-40GB", "vgpu": {"vms": [
        {"name": "vm-a", "namespace": "ml", "type": "GRID A100-10C", "memory": {"base": 2147483648}},
        {"name": "vm-b", "type": "GRID A100-10C"}]}}]}


async def test_agent_attributes_vgpus_to_vmis(tmp_path):
    async with SimulatedWorld(SCENARIO, workdir=tmp_path / "world") as world:
        kube = KubeApi.from_url(world.api.url)
        agent = Agent(world.settings(sampling={"events": False}), nvml=world.nvml, clock=world.clock, kube=kube)
        await agent.start()
        watcher = asyncio.create_task(agent.pod_watcher.run())
        try:
            assert agent.vmis is not None and await agent.vmis.read()
            result = None
            for _ in range(50):  # until the pod watch has delivered the launcher pods
                result = await agent.cycle_once()
                if all(o.pod for o in result.snapshot.attribution.vgpus.values()) and \
                        len(result.snapshot.attribution.vgpus) == 2:
                    break
                await asyncio.sleep(0.05)
            live = result.snapshot.attribution.vgpus
            assert sorted((o.namespace, o.vmi) for o in live.values()) == [("default", "vm-b"), ("ml", "vm-a")]
            assert all(o.pod.name.startswith(f"virt-launcher-{o.vmi}-") for o in live.values())
            (_, offline), = list(simulate(SCENARIO))[:1]
            assert dict(offline.vgpus) == dict(live)  # the evaluation path fills it the same way
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            await agent.stop()
            await kube.close()
