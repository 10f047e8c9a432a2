"""The sampler reads a vGPU host GPU's vGPUs, and asks nothing vGPU-related twice of a GPU that is no host."""

from __future__ import annotations

import pytest
from sampling_helpers import run_ticks

from watchdog.config.sampling import SamplingSettings
from watchdog.sampling import NvmlSampler
from watchdog.sampling.vgpu import SCHEDULER_LOG_CALL, UTILISATION_CALL, UTILISATION_INFO_CALL
from watchdog.testbed import SimClock, SimulatedGpuNode

VGPU_CALLS = ("nvmlDeviceGetVirtualizationMode", "nvmlDeviceGetHostVgpuMode", "nvmlDeviceGetActiveVgpus",
              "nvmlDeviceGetVgpuSchedulerState", SCHEDULER_LOG_CALL, UTILISATION_CALL, UTILISATION_INFO_CALL,
              "nvmlVgpuInstanceGetUUID", "nvmlVgpuInstanceGetVmID", "nvmlVgpuInstanceGetType",
              "nvmlVgpuInstanceGetFbUsage", "nvmlVgpuInstanceGetGpuInstanceId", "nvmlVgpuTypeGetName",
              "nvmlVgpuTypeGetFramebufferSize")

HOST = {"name": "vgpu-host", "gpus": [
    {"model": "A100-SXM4-40GB", "vgpu": {"scheduler": "equal_share", "vms": [
        {"name": "vm-a", "type": "GRID A100-10C", "sm": {"base": 0.5}, "memory": {"base": "6Gi"},
         "dram": {"base": 0.25}},
        {"name": "vm-b", "type": "GRID A100-10C", "start_tick": 3}]}},
    {"model": "A100-SXM4-40GB"},
]}


def _sampler(node: SimulatedGpuNode, clock: SimClock) -> NvmlSampler:
    sampler = NvmlSampler(node.nvml, node="n", clock=clock, settings=SamplingSettings())
    sampler.open()
    return sampler


def test_a_node_without_vgpu_hosts_is_asked_each_vgpu_call_at_most_once_per_gpu(node, sampler, clock):
    ticks = 3 * SamplingSettings().vgpu_scheduler_log_every_ticks + 1  # past several scheduler-log reads of a host
    run_ticks(sampler, clock, ticks)
    gpus = len(node.scenario.gpus)
    assert node.nvml.calls["nvmlDeviceGetVirtualizationMode"] == gpus
    for name in VGPU_CALLS[1:]:
        assert node.nvml.calls[name] == 0, name
    assert all(gpu.vgpus == () and gpu.vgpu_scheduler is None for gpu in sampler.sample(6).gpus)


def test_a_vgpu_host_gpu_reports_its_vgpus_each_tick():
    clock = SimClock()
    node = SimulatedGpuNode.from_scenario(HOST, clock)
    sampler = _sampler(node, clock)
    first = run_ticks(sampler, clock, 2)
    host, plain = first.gpus
    assert plain.vgpus == () and plain.vgpu_scheduler is None
    assert host.vgpu_scheduler == "equal_share"
    (vgpu,) = host.vgpus
    assert vgpu.type_name == "GRID A100-10C" and vgpu.vm_id_type == "uuid" and vgpu.gpu_instance is None
    assert vgpu.fb_used_bytes == 6 << 30 and vgpu.fb_total_bytes == 10 << 30
    assert (vgpu.sm_util, vgpu.memory_util, vgpu.encoder_util, vgpu.decoder_util) == (0.5, 0.25, 0.0, 0.0)
    later = run_ticks(sampler, clock, 3, first=2)
    assert [v.vm_id for v in later.gpus[0].vgpus][0] == vgpu.vm_id and len(later.gpus[0].vgpus) == 2
    # identities are read once per instance, usage every tick
    assert node.nvml.calls["nvmlVgpuInstanceGetUUID"] == 2
    assert node.nvml.calls["nvmlVgpuInstanceGetFbUsage"] == 2 + 2 * 2 + 1
    sampler.close()
    node.close()


def test_not_supported_from_a_host_stops_that_call_for_good():
    clock = SimClock()
    node = SimulatedGpuNode.from_scenario(HOST, clock)
    node.inject_error("nvmlDeviceGetActiveVgpus", node.nvml.NVML_ERROR_NOT_SUPPORTED, device_index=0, times=None)
    sampler = _sampler(node, clock)
    last = run_ticks(sampler, clock, 4)
    assert node.nvml.calls["nvmlDeviceGetActiveVgpus"] == 1
    assert last.gpus[0].vgpus == () and last.gpus[0].vgpu_scheduler == "equal_share"
    sampler.close()
    node.close()



def test_the_plausibility_gate_refuses_impossible_vgpu_readings():
    import dataclasses

    from watchdog.model import GpuSample, NodeSample, VgpuSample
    from watchdog.model.plausibility import PlausibilityGate

    good = VgpuSample(uuid="v-1", type_name="GRID A100-4C", vm_id="vm", vm_id_type="uuid", fb_used_bytes=1 << 30,
                      fb_total_bytes=4 << 30, sm_util=0.5)
    bad = dataclasses.replace(good, uuid="v-2", fb_used_bytes=5 << 30, sm_util=1.5, decoder_util=-0.1)
    gpu = GpuSample(index=0, uuid="GPU-1", name="A100", memory_total_bytes=40 << 30, vgpus=(good, bad))
    admitted = PlausibilityGate().admit(NodeSample(node="n", tick=0, timestamp=0.0, gpus=(gpu,)))
    kept_good, kept_bad = admitted.gpus[0].vgpus
    assert kept_good is good
    assert (kept_bad.fb_used_bytes, kept_bad.sm_util, kept_bad.decoder_util) == (None, None, None)
    assert kept_bad.fb_total_bytes == 4 << 30
    assert {(r.device, r.field) for r in admitted.rejected} == {
        ("v-2", "fb_used_bytes"), ("v-2", "sm_util"), ("v-2", "decoder_util")}


def test_the_plausibility_gate_refuses_an_impossible_vgpu_scheduler_time_slice_and_runlist():
    from watchdog.model import GpuSample, NodeSample, VgpuRunlist
    from watchdog.model.plausibility import PlausibilityGate

    fine = VgpuRunlist(runlist=0, run_seconds=12.5, slices=40, preemption_seconds=0.1)
    broken = VgpuRunlist(runlist=1, run_seconds=float("nan"), slices=40)
    too_many = VgpuRunlist(runlist=2, run_seconds=1.0, slices=201)  # the log holds 200 entries
    gpu = GpuSample(index=0, uuid="GPU-1", name="A100", vgpu_scheduler="best_effort", vgpu_timeslice_seconds=-0.002,
                    vgpu_runlists=(fine, broken, too_many))
    admitted = PlausibilityGate().admit(NodeSample(node="n", tick=0, timestamp=0.0, gpus=(gpu,)))
    kept = admitted.gpus[0]
    assert kept.vgpu_timeslice_seconds is None and kept.vgpu_runlists == (fine,)
    assert {(r.check, r.field) for r in admitted.rejected} == {
        ("context_switch", "vgpu_timeslice_seconds"), ("context_switch", "vgpu_runlists[1]"),
        ("context_switch", "vgpu_runlists[2]")}
    sane = GpuSample(index=0, uuid="GPU-1", name="A100", vgpu_timeslice_seconds=0.002, vgpu_runlists=(fine,))
    assert PlausibilityGate().admit(NodeSample(node="n", tick=0, timestamp=0.0, gpus=(sane,))).rejected == ()


def test_the_probe_lists_every_vgpu_call_per_gpu():
    from watchdog.sampling.probe import probe
    from watchdog.sampling.probe_table import render_table
    from watchdog.sampling.probe_vgpu import GPU_CALLS, INSTANCE_CALLS, TYPE_CALLS, UTILISATION_CALLS

    node = SimulatedGpuNode.from_scenario(HOST, SimClock())
    report = probe(node.nvml, sleep=lambda seconds: None)
    host, plain = report["gpus"]
    for name in GPU_CALLS + UTILISATION_CALLS:
        assert host["calls"][name]["supported"], name
        if name != "nvmlDeviceGetVirtualizationMode":
            assert plain["calls"][name] == {**plain["calls"][name], "supported": False, "error": "not_supported"}
    assert plain["calls"]["nvmlDeviceGetVirtualizationMode"]["value"] == node.nvml.NVML_GPU_VIRTUALIZATION_MODE_NONE
    assert "vgpus" not in plain
    (vgpu,) = host["vgpus"]  # vm-b starts at tick 3
    assert set(vgpu["calls"]) == set(INSTANCE_CALLS + TYPE_CALLS)
    assert all(answer["supported"] for answer in vgpu["calls"].values())
    assert vgpu["calls"]["nvmlVgpuTypeGetName"]["value"] == "GRID A100-10C"
    table = render_table(report, width=120)
    assert "vGPU host" in table and "equal_share" in table and "GRID A100-10C" in table
    assert "nvmlVgpuInstanceGetFbUsage                supported      6.0 GiB" in table
    node.close()


def test_utilisation_comes_from_the_versioned_call_and_falls_back_once_per_gpu():
    clock = SimClock()
    node = SimulatedGpuNode.from_scenario(HOST, clock)
    sampler = _sampler(node, clock)
    run_ticks(sampler, clock, 4)
    assert node.nvml.calls[UTILISATION_INFO_CALL] == 4 and node.nvml.calls[UTILISATION_CALL] == 0
    sampler.close()
    node.close()
    # A driver without the versioned call: asked once, then the unversioned call every tick, readings the same.
    for error in ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND"):
        clock = SimClock()
        node = SimulatedGpuNode.from_scenario(HOST, clock)
        node.inject_error(UTILISATION_INFO_CALL, getattr(node.nvml, error), device_index=0, times=None)
        sampler = _sampler(node, clock)
        last = run_ticks(sampler, clock, 4)
        assert node.nvml.calls[UTILISATION_INFO_CALL] == 1, error
        assert node.nvml.calls[UTILISATION_CALL] == 4, error
        assert last.gpus[0].vgpus[0].sm_util == 0.5
        sampler.close()
        node.close()


def test_the_scheduler_state_and_log_are_read_and_the_log_only_every_few_ticks():
    clock = SimClock()
    node = SimulatedGpuNode.from_scenario(HOST, clock)
    every = 3
    sampler = NvmlSampler(node.nvml, node="n", clock=clock,
                          settings=SamplingSettings(vgpu_scheduler_log_every_ticks=every))
    sampler.open()
    last = run_ticks(sampler, clock, 2 * every + 1)
    host = last.gpus[0]
    assert node.nvml.calls[SCHEDULER_LOG_CALL] == 3  # ticks 0, every, 2 × every
    assert host.vgpu_scheduler_arr == "enabled" and host.vgpu_timeslice_seconds > 0
    (runlist,) = [r for r in host.vgpu_runlists if r.run_seconds > 0]  # vm-b asks nothing: its runlist never runs
    assert runlist.slices > 0
    # vm-a has run half of the GPU's time (it asks 0.5 and gets it) in the ticks before the last log read
    ticks_run = 2 * every
    assert runlist.run_seconds == pytest.approx(0.5 * ticks_run * node.scenario.tick_seconds, rel=0.02)
    sampler.close()
    node.close()
