"""Every NVML failure the sampler must survive, injected through the simulated driver."""

from __future__ import annotations

import pynvml
from sampling_helpers import run_ticks

from watchdog.config.sampling import SamplingSettings
from watchdog.sampling import NvmlSampler
from watchdog.testbed import SimClock, SimulatedGpuNode


def test_not_supported_value_is_absent_and_never_asked_again(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock
) -> None:
    node.inject_error("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NOT_SUPPORTED, device_index=0, times=1)
    first = sampler.sample(0)
    clock.advance(1.0)
    calls_after_first = node.nvml.calls["nvmlDeviceGetPowerUsage"]
    later = run_ticks(sampler, clock, 4, first=1)

    assert first.gpus[0].power_watts is None and later.gpus[0].power_watts is None
    assert later.gpus[1].power_watts is not None and later.gpus[2].power_watts is not None
    assert node.nvml.calls["nvmlDeviceGetPowerUsage"] - calls_after_first == 4 * 2  # GPUs 1 and 2 only
    assert sampler.error_counts() == {"not_supported": 1}


def test_timeout_costs_one_value_for_one_tick(sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock) -> None:
    node.inject_error("nvmlDeviceGetTemperature", pynvml.NVML_ERROR_TIMEOUT, device_index=1, times=1)
    first = sampler.sample(0)
    clock.advance(1.0)
    second = sampler.sample(1)

    assert first.gpus[1].temperature_celsius is None
    assert first.gpus[0].temperature_celsius is not None and first.gpus[1].power_watts is not None
    assert second.gpus[1].temperature_celsius is not None  # transient: asked again
    assert sampler.error_counts() == {"timeout": 1}


def test_unknown_error_is_counted_by_name(sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock) -> None:
    node.inject_error("nvmlDeviceGetMemoryInfo", pynvml.NVML_ERROR_UNKNOWN, device_index=2, times=1)
    sample = sampler.sample(0)

    assert sample.gpus[2].memory_total_bytes is None
    assert sampler.error_counts() == {"unknown": 1}


def test_gpu_lost_marks_that_gpu_and_samples_the_others(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock
) -> None:
    run_ticks(sampler, clock, 2)
    node.lose_gpu(1)
    lost = sampler.sample(2)
    clock.advance(1.0)
    calls = node.nvml.calls.copy()
    still_lost = sampler.sample(3)

    for sample in (lost, still_lost):
        gpu = sample.gpus[1]
        assert gpu.lost and gpu.uuid == node.gpu_uuids[1]
        assert gpu.power_watts is None and gpu.instances == ()
        assert not sample.gpus[0].lost and sample.gpus[0].instances
        assert sample.gpus[2].processes
    # Within the retry period the lost GPU is not asked at all: GPUs 0 and 2 answer the MIG-mode call.
    assert node.nvml.calls["nvmlDeviceGetMigMode"] - calls["nvmlDeviceGetMigMode"] == 2
    assert sampler.error_counts()["gpu_is_lost"] == 1


def test_lost_gpu_is_retried_and_comes_back(node: SimulatedGpuNode, clock: SimClock) -> None:
    sampler = NvmlSampler(node.nvml, node="n", clock=clock, settings=SamplingSettings(lost_retry_seconds=5.0))
    sampler.open()
    run_ticks(sampler, clock, 2)
    node.inject_error("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_GPU_IS_LOST, device_index=0, times=1)
    lost = sampler.sample(2)
    clock.advance(2.0)
    waiting = sampler.sample(3)
    clock.advance(4.0)
    back = sampler.sample(4)
    clock.advance(1.0)
    settled = sampler.sample(5)
    sampler.close()

    assert lost.gpus[0].lost and waiting.gpus[0].lost
    assert not back.gpus[0].lost and back.gpus[0].power_watts is not None
    assert len(back.gpus[0].instances) == 4
    # Its GPM streams were dropped with the loss and start again: rates return one interval later.
    assert all(mig.dram_bw_util is not None for mig in settled.gpus[0].instances)


def test_gpu_lost_at_open_is_reported_lost(node: SimulatedGpuNode, clock: SimClock) -> None:
    node.lose_gpu(2)
    sampler = NvmlSampler(node.nvml, node="n", clock=clock)
    sampler.open()
    sample = sampler.sample(0)
    sampler.close()

    assert sample.gpus[2].lost and not sample.gpus[0].lost
    assert len(sample.gpus[0].instances) == 4


def test_sparse_slots_are_all_scanned_past_a_failing_slot(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock
) -> None:
    # Demo GPU 0 is [3g, 2g, 1g, 1g]: MIG slots 0, 4, 3, 6, with 1, 2, 5 empty (NotFound).
    node.reconfigure_mig(0, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])
    node.inject_error("nvmlDeviceGetMigDeviceHandleByIndex", pynvml.NVML_ERROR_UNKNOWN, device_index=0, times=1)
    sampler.request_enumeration(0)
    sample = sampler.sample(0)

    slots = {d.uuid: d.slot for d in node.device_uuids() if d.gpu_index == 0 and d.slot is not None}
    found = {mig.uuid for mig in sample.gpus[0].instances}
    assert found == {uuid for uuid, slot in slots.items() if slot != 0}  # slot 0 failed, the rest were still read
    assert sampler.error_counts() == {"enumeration": 1}
    clock.advance(1.0)
    sampler.request_enumeration(0)
    assert {mig.uuid for mig in sampler.sample(1).gpus[0].instances} == set(slots)


def test_library_mismatch_falls_back_to_v2_and_remembers(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock
) -> None:
    node.compute_processes_v3_missing = True
    sample = run_ticks(sampler, clock, 3)

    assert sampler.uses_process_v2
    for listing in ("Compute", "MPSCompute", "Graphics"):  # each list falls back once, for every device
        assert node.nvml.calls[f"nvmlDeviceGet{listing}RunningProcesses"] == 1
        assert node.nvml.calls[f"nvmlDeviceGet{listing}RunningProcesses_v2"] >= 1
    # The compute list is asked every tick; an empty MPS or graphics list only at every QUIET_LIST_EVERY-th tick.
    assert node.nvml.calls["nvmlDeviceGetComputeRunningProcesses_v2"] > node.nvml.calls[
        "nvmlDeviceGetMPSComputeRunningProcesses_v2"]
    pids = {p.pid for gpu in sample.gpus for mig in gpu.instances for p in mig.processes}
    pids |= {p.pid for p in sample.gpus[2].processes}
    assert pids == {p.pid for p in node.processes()}
    assert sampler.error_counts() == {"library_mismatch": 3}  # one per list


def test_clock_reasons_fall_back_to_the_throttle_call(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock
) -> None:
    node.clock_event_reasons_missing = True
    sample = run_ticks(sampler, clock, 3)

    assert sample.gpus[0].clock_event_reasons == node.state(2).gpus[0].clock_reasons
    assert node.nvml.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1
    assert node.nvml.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 3 * 3  # every GPU, every tick
    assert sampler.error_counts() == {"function_not_found": 1}


def test_memory_falls_back_to_v1_when_v2_is_refused(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock
) -> None:
    node.inject_error("nvmlDeviceGetMemoryInfo", pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH, device_index=2, times=1)
    first = sampler.sample(0)
    clock.advance(1.0)
    second = sampler.sample(1)
    state = node.state(1).gpus[2].whole

    for sample in (first, second):
        gpu = sample.gpus[2]
        assert gpu.memory_total_bytes == state.memory_total
        assert gpu.memory_reserved_bytes is None  # v1 cannot tell reserved from used
    assert second.gpus[2].memory_used_bytes == state.memory_used + state.memory_reserved
    assert second.gpus[0].memory_reserved_bytes is not None
    assert sampler.error_counts() == {"argument_version_mismatch": 1}


def test_broken_binding_costs_a_value_not_the_tick(sampler: NvmlSampler, node: SimulatedGpuNode) -> None:
    def broken(handle: object) -> int:
        raise RuntimeError("binding bug")

    node.nvml.nvmlDeviceGetEnforcedPowerLimit = broken
    sample = sampler.sample(0)

    assert all(gpu.power_limit_watts is None and gpu.power_watts is not None for gpu in sample.gpus)
    assert sampler.error_counts() == {"unexpected": 3}
