"""The sampler against the simulated demo node: a complete, correct NodeSample on a healthy node."""

from __future__ import annotations

import pytest

from sampling_helpers import run_ticks
from watchdog.config.sampling import SamplingSettings
from watchdog.sampling import NvmlSampler, NvmlUnavailable
from watchdog.sampling.inventory import profile_from_name
from watchdog.testbed import SimClock, SimulatedGpuNode


def test_full_sample_of_the_demo_node(sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock) -> None:
    sample = run_ticks(sampler, clock, 3)

    assert sample.node == "sim-node-1"
    assert sample.tick == 2
    assert sample.driver_version == node.scenario.driver_version
    assert [gpu.index for gpu in sample.gpus] == [0, 1, 2]
    assert [gpu.uuid for gpu in sample.gpus] == node.gpu_uuids
    expected = {d.uuid: d for d in node.device_uuids() if d.mig_profile is not None}
    seen = {}
    for gpu in sample.gpus[:2]:
        assert gpu.mig_enabled and not gpu.lost
        assert gpu.gpu_util is None and gpu.processes == ()  # NotSupported on MIG GPUs: not even asked
        for mig in gpu.instances:
            seen[mig.uuid] = mig
            device = expected[mig.uuid]
            assert (mig.gpu_index, mig.gpu_instance, mig.compute_instance) == (
                device.gpu_index, device.gpu_instance, device.compute_instance)
            assert mig.profile == device.mig_profile
            assert mig.memory_total_bytes and mig.memory_used_bytes is not None
            assert mig.memory_reserved_bytes is not None  # v2 splits it out of "used"
            assert mig.dram_bw_util is not None and 0 < mig.dram_bw_util <= 1
            assert mig.sm_util is not None and 0 < mig.sm_util <= 1
            assert mig.sm_occupancy is not None
            for process in mig.processes:
                assert (process.gpu_instance, process.compute_instance) == (mig.gpu_instance, mig.compute_instance)
                assert process.used_memory_bytes is not None
    assert seen.keys() == expected.keys()

    running = {p.pid: p for p in node.processes()}
    mig_pids = {p.pid for gpu in sample.gpus for mig in gpu.instances for p in mig.processes}
    a100 = sample.gpus[2]
    assert not a100.mig_enabled and a100.instances == ()
    assert a100.gpu_util is not None and a100.memory_util is not None
    assert a100.sm_util is None and a100.dram_bw_util is None  # the A100 has no GPM
    assert {p.pid for p in a100.processes} | mig_pids == set(running)
    for process in a100.processes:
        assert process.sm_util is not None and 0 < process.sm_util <= 1  # time-sliced share per process
        assert process.memory_util is not None
        assert process.gpu_instance is None and process.compute_instance is None  # 0xFFFFFFFF
    assert sampler.error_counts() == {}


def test_whole_gpu_readings_are_in_base_units(sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock) -> None:
    sample = run_ticks(sampler, clock, 2)
    state = node.state(1).gpus[0]

    gpu = sample.gpus[0]
    assert gpu.power_watts == pytest.approx(state.power_watts, abs=0.001)  # mW → W
    assert gpu.power_limit_watts == 600.0
    assert gpu.sm_clock_mhz == state.sm_clock_mhz
    assert gpu.sm_clock_max_mhz == node.models[0].sm_clock_max_mhz
    assert gpu.clock_event_reasons == state.clock_reasons
    assert gpu.temperature_celsius == int(state.temperature_celsius)
    assert gpu.pcie_rx_bytes_per_second == int(state.pcie_rx_bytes / 1024) * 1024  # KB/s → bytes/s
    assert gpu.memory_total_bytes == state.whole.memory_total


def test_first_tick_has_no_gpm_rates_and_the_second_has(sampler: NvmlSampler, clock: SimClock) -> None:
    first = sampler.sample(0)
    clock.advance(1.0)
    second = sampler.sample(1)

    assert all(mig.dram_bw_util is None and mig.sm_util is None for mig in first.gpus[0].instances)
    assert all(mig.dram_bw_util is not None and mig.sm_util is not None for mig in second.gpus[0].instances)


def test_steady_ticks_do_not_enumerate_again(sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock) -> None:
    run_ticks(sampler, clock, 2)
    before = node.nvml.calls.copy()
    run_ticks(sampler, clock, 5, first=2)
    calls = node.nvml.calls

    for cached in ("nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetUUID", "nvmlDeviceGetName",
                   "nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetMaxClockInfo", "nvmlGpmQueryDeviceSupport"):
        assert calls[cached] == before[cached], cached
    # Samples are reused: two per GPM stream, allocated once.
    assert calls["nvmlGpmSampleAlloc"] == before["nvmlGpmSampleAlloc"]


def test_close_frees_gpm_samples_and_shuts_down_once(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock
) -> None:
    run_ticks(sampler, clock, 3)
    sampler.close()
    sampler.close()

    assert node.nvml.calls["nvmlGpmSampleFree"] == node.nvml.calls["nvmlGpmSampleAlloc"] > 0
    assert node.nvml.calls["nvmlShutdown"] == 1


def test_sample_opens_nvml_when_not_yet_open(node: SimulatedGpuNode, clock: SimClock) -> None:
    sampler = NvmlSampler(node.nvml, node="n", clock=clock)
    try:
        sample = sampler.sample(0)
    finally:
        sampler.close()
    assert len(sample.gpus) == 3
    assert node.nvml.calls["nvmlInit"] == 1


def test_nvml_init_failure_degrades_to_an_empty_sample(node: SimulatedGpuNode, clock: SimClock) -> None:
    node.inject_error("nvmlInit", node.nvml.NVML_ERROR_LIBRARY_NOT_FOUND, times=2)
    sampler = NvmlSampler(node.nvml, node="n", clock=clock)

    with pytest.raises(NvmlUnavailable, match="nvmlInit failed"):
        sampler.open()
    sample = sampler.sample(0)
    assert sample.gpus == ()
    assert sampler.error_counts() == {"init": 1}
    recovered = sampler.sample(1)  # the injected failures are used up: the next tick opens NVML
    sampler.close()
    assert len(recovered.gpus) == 3


def test_process_shares_are_held_while_nvml_has_no_newer_sample(node: SimulatedGpuNode, clock: SimClock) -> None:
    sampler = NvmlSampler(node.nvml, node="n", clock=clock, settings=SamplingSettings(process_util_hold_seconds=2.0))
    sampler.open()
    first = sampler.sample(0)
    clock.advance(0.5)  # same simulated tick: nvmlDeviceGetProcessUtilization answers NotFound
    held = sampler.sample(1)
    sampler.close()

    shares = {p.pid: p.sm_util for p in first.gpus[2].processes}
    assert {p.pid: p.sm_util for p in held.gpus[2].processes} == shares
    assert None not in shares.values()
    assert sampler.error_counts() == {}  # NotFound here means "nothing new", not a failure


def test_process_shares_expire_after_the_hold(node: SimulatedGpuNode, clock: SimClock) -> None:
    sampler = NvmlSampler(node.nvml, node="n", clock=clock, settings=SamplingSettings(process_util_hold_seconds=0.2))
    sampler.open()
    sampler.sample(0)
    clock.advance(0.5)
    expired = sampler.sample(1)
    sampler.close()

    assert expired.gpus[2].processes and all(p.sm_util is None for p in expired.gpus[2].processes)


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "1g.10gb"),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb+me", "1g.5gb+me"),
        ("NVIDIA A100-SXM4-80GB MIG 1c.2g.20gb", "1c.2g.20gb"),
        ("NVIDIA H100 80GB HBM3", ""),
    ],
)
def test_profile_is_the_text_after_mig(name: str, profile: str) -> None:
    assert profile_from_name(name) == profile


def test_process_utilisation_on_an_idle_gpu_is_nothing_new_not_an_error(clock: SimClock) -> None:
    node = SimulatedGpuNode.from_scenario({"name": "idle", "gpus": [{"model": "H100-80GB-HBM3"}]}, clock)
    sampler = NvmlSampler(node.nvml, node="n", clock=clock)
    sampler.open()
    try:
        samples = [sampler.sample(tick) for tick in range(2)]
    finally:
        sampler.close()
        node.close()

    assert all(s.gpus[0].processes == () and not s.gpus[0].mig_enabled for s in samples)
    assert node.nvml.calls["nvmlDeviceGetProcessUtilization"] == 2  # still asked: a process may start any time
    assert sampler.error_counts() == {}  # pynvml's NVMLError(SUCCESS) means "no samples", like NotFound
