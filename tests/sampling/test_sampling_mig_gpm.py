"""MIG reconfiguration and the GPM sample lifecycle (version, the 100 ms rule, freeing)."""

from __future__ import annotations

import pytest
from sampling_helpers import run_ticks

from watchdog.sampling import NvmlSampler
from watchdog.testbed import SimClock, SimulatedGpuNode

WHOLE_H100 = {
    "name": "one-h100",
    "gpus": [{"model": "H100-80GB-HBM3"}],
    "pods": [
        {
            "namespace": "team-a",
            "name": "trainer",
            "device": {"gpu": 0},
            "workload": {"memory": {"base": "10Gi"}, "sm": {"base": 0.5}, "dram": {"base": 0.4}},
        }
    ],
}


def _held_samples(node: SimulatedGpuNode) -> int:
    return node.nvml.calls["nvmlGpmSampleAlloc"] - node.nvml.calls["nvmlGpmSampleFree"]


def test_stale_handles_trigger_enumeration_and_reset_gpm(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock
) -> None:
    before = run_ticks(sampler, clock, 2)
    node.reconfigure_mig(0, ["7g.80gb"])
    after = sampler.sample(2)
    clock.advance(1.0)
    settled = sampler.sample(3)

    new_uuid = next(d.uuid for d in node.device_uuids() if d.gpu_index == 0 and d.mig_profile == "7g.80gb")
    assert [mig.uuid for mig in after.gpus[0].instances] == [new_uuid]
    assert new_uuid not in {mig.uuid for mig in before.gpus[0].instances}
    assert after.gpus[0].instances[0].profile == "7g.80gb"
    assert after.gpus[0].instances[0].memory_total_bytes
    assert after.gpus[0].instances[0].dram_bw_util is None  # a new GPU instance: its GPM stream starts over
    assert settled.gpus[0].instances[0].dram_bw_util is not None
    assert "invalid_argument" in sampler.error_counts()  # the stale answer that gave the change away
    # The four old instances' samples were freed: 2 streams on GPU 0 and 6 on GPU 1, two samples each.
    assert _held_samples(node) == 2 * (2 + 6)


def test_mig_change_request_enumerates_before_sampling(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock
) -> None:
    run_ticks(sampler, clock, 2)
    node.reconfigure_mig(1, ["1g.10gb"] * 7)
    sampler.request_enumeration(1)  # what the Xid watcher's on_mig_change does
    sample = sampler.sample(2)

    assert [mig.profile for mig in sample.gpus[1].instances] == ["1g.10gb"] * 7
    assert sorted(mig.gpu_instance for mig in sample.gpus[1].instances) == sorted(
        d.gpu_instance for d in node.device_uuids() if d.gpu_index == 1 and d.mig_profile
    )
    assert sampler.error_counts() == {}  # no stale handle was ever used
    assert len(sample.gpus[0].instances) == 4  # GPU 0 untouched


def test_gpm_samples_closer_than_100ms_keep_the_previous_value(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock
) -> None:
    run_ticks(sampler, clock, 2)
    diffed = sampler.sample(2)
    metrics_calls = node.nvml.calls["nvmlGpmMetricsGet"]
    clock.advance(0.05)
    too_soon = sampler.sample(3)

    assert node.nvml.calls["nvmlGpmMetricsGet"] == metrics_calls  # no diff, no new sample
    assert [m.dram_bw_util for m in too_soon.gpus[0].instances] == [m.dram_bw_util for m in diffed.gpus[0].instances]
    assert all(m.sm_util is not None for m in too_soon.gpus[0].instances)
    clock.advance(0.1)
    sampler.sample(4)
    assert node.nvml.calls["nvmlGpmMetricsGet"] == metrics_calls + 2 * 7  # one GI and one CI stream per instance
    # The simulated driver refuses requests without NVML_GPM_METRICS_GET_VERSION and samples < 100 ms apart.
    assert sampler.error_counts() == {}


def test_gpm_is_not_asked_on_a_gpu_without_it(sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock) -> None:
    run_ticks(sampler, clock, 3)

    # H100s are in MIG mode (per-CI samples only, 7 instances); the A100 reports no GPM and is never sampled.
    assert node.nvml.calls["nvmlGpmSampleGet"] == 3 * 7
    assert node.nvml.calls["nvmlGpmQueryDeviceSupport"] == 3


def test_whole_gpu_gpm_when_not_in_mig_mode(clock: SimClock) -> None:
    node = SimulatedGpuNode.from_scenario(WHOLE_H100, clock)
    sampler = NvmlSampler(node.nvml, node="n", clock=clock)
    sampler.open()
    try:
        sample = run_ticks(sampler, clock, 3)
    finally:
        sampler.close()
        node.close()

    gpu = sample.gpus[0]
    assert not gpu.mig_enabled
    assert gpu.sm_util == pytest.approx(0.5, abs=0.05)
    assert gpu.dram_bw_util == pytest.approx(0.4, abs=0.05)
    assert gpu.processes[0].sm_util == pytest.approx(0.5, abs=0.01)
    assert _held_samples(node) == 0


def test_mig_mode_change_enumerates_and_asks_everything_again(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock
) -> None:
    # The simulation cannot switch MIG off, so the mode call alone is made to say "disabled" for GPU 0: the
    # sampler must drop the instances, try the whole-GPU calls, and pick everything up again when MIG is back.
    real_mode = node.nvml.nvmlDeviceGetMigMode
    gpu0 = sampler.gpu_handles()[0][2]

    def mode(handle: object) -> list[int]:
        answer = real_mode(handle)
        return [0, 0] if handle is gpu0 else answer

    run_ticks(sampler, clock, 2)
    node.nvml.nvmlDeviceGetMigMode = mode
    off = sampler.sample(2)
    clock.advance(1.0)
    del node.nvml.nvmlDeviceGetMigMode
    back = sampler.sample(3)

    assert not off.gpus[0].mig_enabled and off.gpus[0].instances == ()
    assert len(off.gpus[1].instances) == 3
    assert back.gpus[0].mig_enabled and len(back.gpus[0].instances) == 4
    assert back.gpus[0].instances[0].dram_bw_util is None  # streams restarted with the new configuration
    # While "off", utilisation was asked and refused (the driver still runs MIG); after the change it is not
    # asked any more because the GPU is in MIG mode again.
    assert sampler.error_counts() == {"not_supported": 2}
