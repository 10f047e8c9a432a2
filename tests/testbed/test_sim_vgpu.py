"""A scenario GPU may be a vGPU host: its VMs' vGPUs answer NVML's vGPU host calls, and the scenario is checked
against the vGPU types of the GPU model."""

from __future__ import annotations

import pytest

from watchdog.sampling import nvml_library
from watchdog.testbed import SimClock, SimulatedGpuNode
from watchdog.testbed.profiles import VGPU_TYPES, vgpu_type
from watchdog.testbed.scenario import ScenarioError, load_scenario

pynvml = nvml_library.load()


def _scenario(vgpu: dict, model: str = "A100-SXM4-40GB", **extra) -> dict:
    return {"name": "vgpu", "gpus": [{"model": model, "vgpu": vgpu}], **extra}


def test_vgpu_type_table_holds_the_user_guides_framebuffers():
    assert [(t.name, t.framebuffer_gib, t.max_instances) for t in VGPU_TYPES["A100-SXM4-40GB"]] == [
        ("GRID A100-4C", 4, 10), ("GRID A100-5C", 5, 8), ("GRID A100-8C", 8, 5), ("GRID A100-10C", 10, 4),
        ("GRID A100-20C", 20, 2), ("GRID A100-40C", 40, 1)]
    assert vgpu_type("H100-80GB-HBM3", "NVIDIA H100-80C").framebuffer_bytes == 80 << 30
    assert len({t.type_id for types in VGPU_TYPES.values() for t in types}) == 10


@pytest.mark.parametrize(("vgpu", "message"), [
    ({"vms": [{"name": "a", "type": "GRID A100-3C"}]}, "vgpu.vms.0.type"),
    ({"vms": [{"name": "a", "type": "GRID A100-4C"}, {"name": "b", "type": "GRID A100-5C"}]}, "share one type"),
    ({"vms": [{"name": str(n), "type": "GRID A100-20C"} for n in range(3)]}, "at most 2"),
    ({"vms": [{"name": "a", "type": "GRID A100-4C"}, {"name": "a", "type": "GRID A100-4C"}]}, "unique"),
    ({"scheduler": "round_robin", "vms": []}, "scheduler"),
])
def test_bad_vgpu_sections_are_refused_naming_the_field(vgpu, message):
    with pytest.raises((ScenarioError, ValueError), match=message):
        load_scenario(_scenario(vgpu))


def test_a_pod_cannot_use_a_vgpu_host_gpu():
    pods = [{"namespace": "a", "name": "p", "device": {"gpu": 0}}]
    with pytest.raises((ScenarioError, ValueError), match="vGPU host"):
        load_scenario(_scenario({"vms": []}, pods=pods))


def test_vms_come_and_go_with_their_ticks_and_follow_their_curves():
    clock = SimClock()
    sim = SimulatedGpuNode.from_scenario(_scenario({"scheduler": "fixed_share", "vms": [
        {"name": "early", "type": "GRID A100-10C", "memory": {"base": "2Gi", "steps": [{"at": 2, "value": "3Gi"}]}},
        {"name": "late", "type": "GRID A100-10C", "start_tick": 2, "sm": {"base": 0.25}}]}), clock)
    nvml = sim.nvml
    nvml.nvmlInit()
    gpu = nvml.nvmlDeviceGetHandleByIndex(0)
    (early,) = nvml.nvmlDeviceGetActiveVgpus(gpu)
    assert nvml.nvmlVgpuInstanceGetFbUsage(early) == 2 << 30
    clock.advance(2 * sim.scenario.tick_seconds)
    early_again, late = nvml.nvmlDeviceGetActiveVgpus(gpu)
    assert early_again == early
    assert nvml.nvmlVgpuInstanceGetFbUsage(early) == 3 << 30
    by_instance = {s.vgpuInstance: s.smUtil.uiVal for s in nvml.nvmlDeviceGetVgpuUtilization(gpu, 0)}
    assert by_instance == {early: 0, late: 25}
    assert nvml.nvmlVgpuTypeGetName(nvml.nvmlVgpuInstanceGetType(late)) == "GRID A100-10C"
    assert nvml.nvmlDeviceGetVgpuSchedulerState(gpu).schedulerPolicy == pynvml.NVML_VGPU_SCHEDULER_POLICY_FIXED_SHARE
    assert nvml.nvmlDeviceGetHostVgpuMode(gpu) == pynvml.NVML_HOST_VGPU_MODE_SRIOV
    sim.close()
