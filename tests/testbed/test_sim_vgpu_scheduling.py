"""A vGPU host's scheduler shares the GPU among its VMs as its policy says, the VMs' achieved load is the GPU's own
load (utilisation, power, the power cap's clock), and a MIG-backed vGPU owns a GPU instance of its type's profile."""

from __future__ import annotations

import pytest

from watchdog.sampling import nvml_library
from watchdog.testbed import SimClock, SimulatedGpuNode
from watchdog.testbed.contention import proportional_share, switching
from watchdog.testbed.profiles import GPU_MODELS, vgpu_type
from watchdog.testbed.scenario import ScenarioError, load_scenario
from watchdog.testbed.vgpu_scheduling import schedule_vgpus

pynvml = nvml_library.load()
DEMANDS = [0.3, 0.25, 1.0]
OVERHEAD = 0.03


def test_best_effort_shares_follow_demand_once_the_gpu_is_oversubscribed():
    shares = schedule_vgpus("best_effort", DEMANDS, [0.2] * 3, max_instances=4, switch_overhead=OVERHEAD)
    lost, _ = switching(DEMANDS, per_context=OVERHEAD)
    assert shares.sm == pytest.approx(proportional_share(DEMANDS, 1.0 - lost))
    assert sum(shares.sm) + shares.switching == pytest.approx(1.0)  # the GPU is saturated
    assert shares.sm[0] < DEMANDS[0]  # the modest VM is squeezed below what it asks
    # its DRAM use follows the time it ran
    assert shares.dram[0] == pytest.approx(0.2 * shares.sm[0] / DEMANDS[0])
    relaxed = schedule_vgpus("best_effort", [0.3, 0.25, 0.1], [0.0] * 3, max_instances=4, switch_overhead=OVERHEAD)
    assert relaxed.sm == pytest.approx([0.3, 0.25, 0.1])  # below saturation everyone gets what it asks


def test_equal_share_caps_each_busy_vgpu_at_one_nth_and_leaves_the_rest_idle():
    shares = schedule_vgpus("equal_share", DEMANDS, [0.0] * 3, max_instances=4, switch_overhead=OVERHEAD)
    lost, _ = switching(DEMANDS, per_context=OVERHEAD)
    cap = (1.0 - lost) / 3
    assert shares.sm == pytest.approx([0.3, 0.25, cap])
    assert sum(shares.sm) + shares.switching < 1.0  # unused share is not handed to the greedy VM
    idle = schedule_vgpus("equal_share", [0.9, 0.0], [0.0, 0.0], max_instances=4, switch_overhead=OVERHEAD)
    assert idle.sm == pytest.approx([0.9, 0.0])  # N counts the vGPUs with work only


def test_fixed_share_caps_at_one_over_the_types_most_instances_however_many_run():
    kind = vgpu_type("A100-SXM4-40GB", "GRID A100-10C")
    shares = schedule_vgpus("fixed_share", [0.9], [0.0], max_instances=kind.max_instances, switch_overhead=0.0)
    assert shares.sm == pytest.approx([1.0 / kind.max_instances])


def _node(vgpu: dict, **gpu) -> SimulatedGpuNode:
    scenario = {"name": "vgpu-physics", "gpus": [{"model": "A100-SXM4-40GB", "vgpu": vgpu, **gpu}]}
    node = SimulatedGpuNode.from_scenario(scenario, SimClock())
    node.nvml.nvmlInit()
    return node


def _vm(name: str, sm: float, **extra) -> dict:
    return {"name": name, "type": "GRID A100-10C", "sm": {"base": sm}, **extra}


def test_the_vms_achieved_load_is_the_gpus_utilisation_and_power():
    busy = _node({"scheduler": "best_effort", "vms": [_vm("a", 0.6), _vm("b", 0.9)]})
    idle = _node({"scheduler": "best_effort", "vms": [_vm("a", 0.0), _vm("b", 0.0)]})
    nvml = busy.nvml
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    by_instance = {s.vgpuInstance: s.smUtil.uiVal for s in nvml.nvmlDeviceGetVgpuInstancesUtilizationInfo(handle, 0)}
    gpu = busy.state().gpus[0]
    assert nvml.nvmlDeviceGetUtilizationRates(handle).gpu == round(100 * gpu.whole.busy) == 100
    assert sum(by_instance.values()) == pytest.approx(100 * (1.0 - gpu.whole.switching), abs=2)
    assert by_instance[min(by_instance)] < 60  # "a" asked 0.6 and is squeezed
    idle_handle = idle.nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetPowerUsage(handle) > idle.nvml.nvmlDeviceGetPowerUsage(idle_handle)
    assert idle.nvml.nvmlDeviceGetUtilizationRates(idle_handle).gpu == 0
    busy.close()
    idle.close()


def test_a_mig_backed_vgpu_sits_on_a_gpu_instance_of_its_profile_and_can_power_cap_the_board():
    model = GPU_MODELS["A100-SXM4-40GB"]
    node = _node({"vms": [{"name": "hog", "type": "GRID A100-4-20C", "sm": {"base": 1.0}},
                          {"name": "small", "type": "GRID A100-1-5C", "sm": {"base": 0.5}}]},
                 mig=["4g.20gb", "1g.5gb", "1g.5gb"], power_limit_watts=model.min_power_limit_watts * 2)
    nvml = node.nvml
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    hog, small = nvml.nvmlDeviceGetActiveVgpus(handle)
    layout = node.layout(0)
    assert nvml.nvmlVgpuInstanceGetGpuInstanceId(hog) == layout.instances[0].gpu_instance
    assert nvml.nvmlVgpuInstanceGetGpuInstanceId(small) == layout.instances[1].gpu_instance
    assert nvml.nvmlVgpuTypeGetFramebufferSize(nvml.nvmlVgpuInstanceGetType(small)) == 5 << 30
    state = node.state().gpus[0]
    assert state.instances[layout.instances[0].slot].busy == 1.0  # its VM's load is its instance's
    assert state.clock_reasons & pynvml.nvmlClocksEventReasonSwPowerCap  # and drives the board to its cap
    assert nvml.nvmlDeviceGetPowerUsage(handle) <= 1000 * state.power_limit_watts
    assert nvml.nvmlDeviceGetVgpuSchedulerState(handle).arrMode == pynvml.NVML_VGPU_SCHEDULER_ARR_DISABLE
    node.close()


def test_a_time_sliced_vgpu_has_no_gpu_instance_and_the_log_follows_the_shares():
    node = _node({"scheduler": "best_effort", "vms": [_vm("a", 0.5), _vm("b", 0.0)]})
    nvml = node.nvml
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    a, _ = nvml.nvmlDeviceGetActiveVgpus(handle)
    assert nvml.nvmlVgpuInstanceGetGpuInstanceId(a) == 0xFFFFFFFF
    node.clock.advance(10 * node.scenario.tick_seconds)
    log = nvml.nvmlDeviceGetVgpuSchedulerLog(handle)
    entries = log.logEntries[:log.entriesCount]
    assert 0 < log.entriesCount <= pynvml.NVML_SCHEDULER_SW_MAX_LOG_ENTRIES
    newest = {}
    for entry in entries:
        if entry.swRunlistId not in newest or entry.timestamp > newest[entry.swRunlistId].timestamp:
            newest[entry.swRunlistId] = entry
    assert newest[0].timeRunTotal == pytest.approx(0.5 * 10 * node.scenario.tick_seconds * 1e9, rel=0.01)
    assert newest[1].timeRunTotal == 0 and newest[1].timeRun == 0
    node.close()


@pytest.mark.parametrize(("gpu", "message"), [
    ({"vgpu": {"vms": [{"name": "a", "type": "GRID A100-1-5C"}]}}, "vgpu.vms.0.type"),  # MIG-backed, no mig
    ({"mig": ["4g.20gb"], "vgpu": {"vms": [{"name": "a", "type": "GRID A100-10C"}]}}, "vgpu.vms.0.type"),
    ({"mig": ["1g.5gb"], "vgpu": {"vms": [{"name": "a", "type": "GRID A100-1-5C"},
                                          {"name": "b", "type": "GRID A100-1-5C"}]}}, "vgpu.vms.1.type"),
    ({"mig": [{"gi": "4g.20gb", "ci": ["2c", "2c"]}], "vgpu": {"vms": []}}, r"gpus\.0\.mig"),
])
def test_mig_backed_vgpu_scenarios_are_checked_naming_the_field(gpu, message):
    with pytest.raises((ScenarioError, ValueError), match=message):
        load_scenario({"name": "bad", "gpus": [{"model": "A100-SXM4-40GB", **gpu}]})
