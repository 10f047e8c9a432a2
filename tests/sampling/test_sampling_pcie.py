"""PCIe per GPU instance (GPM through nvmlGpmMigSampleGet) and the link's capacity from its generation and width."""

from __future__ import annotations

import pytest
from sampling_helpers import run_ticks

from watchdog.config.sampling import SamplingSettings
from watchdog.sampling import NvmlSampler
from watchdog.sampling.pcie_link import link_bytes_per_second
from watchdog.testbed import SimClock, SimulatedGpuNode
from watchdog.testbed.scenario import Scenario

GEN5_X16 = 32e9 * 128 / 130 / 8 * 16  # PCIe Base Spec: 32 GT/s per lane, 128b/130b encoding


def _scenario(*, per_instance: bool) -> Scenario:
    return Scenario.model_validate({
        "name": "pcie",
        "gpus": [{"model": "H100-80GB-HBM3", "mig": ["3g.40gb", "2g.20gb", "1g.10gb"],
                  "gpm_pcie_per_instance": per_instance}],
        "pods": [
            {"namespace": "batch", "name": "loader", "device": {"gpu": 0, "instance": 0},
             "workload": {"sm": {"base": 0.3}, "pcie": {"base": 4.0e9}, "pcie_tx": {"base": 1.0e9}}},
            {"namespace": "prod", "name": "train", "device": {"gpu": 0, "instance": 1},
             "workload": {"sm": {"base": 0.8}, "pcie": {"base": 2.0e9}}},
        ],
    })


def _sample(per_instance: bool):
    clock = SimClock()
    node = SimulatedGpuNode.from_scenario(_scenario(per_instance=per_instance), clock)
    sampler = NvmlSampler(node.nvml, node="n", clock=clock, settings=SamplingSettings())
    sampler.open()
    try:
        return run_ticks(sampler, clock, 3), sampler.error_counts()
    finally:
        sampler.close()
        node.close()


def test_each_gpu_instance_reports_its_own_share_of_the_link_in_bytes_per_second() -> None:
    sample, _ = _sample(per_instance=True)
    gpu = sample.gpus[0]
    by_profile = {(m.profile, m.gpu_instance): m for m in gpu.instances}
    loader, train, idle = sorted(by_profile.values(), key=lambda m: -(m.pcie_rx_bytes_per_second or 0))
    assert loader.pcie_rx_bytes_per_second == pytest.approx(4.0e9, rel=1e-3)  # MiB/s × 2**20, not a ratio
    assert loader.pcie_tx_bytes_per_second == pytest.approx(1.0e9, rel=1e-3)
    assert train.pcie_rx_bytes_per_second == pytest.approx(2.0e9, rel=1e-3)
    assert idle.pcie_rx_bytes_per_second == 0.0
    assert loader.dram_bw_util is not None  # read in the same GPM request as DRAM
    assert gpu.pcie_link_bytes_per_second == pytest.approx(GEN5_X16)


def test_a_driver_with_whole_gpu_pcie_only_leaves_the_instances_unknown_and_dram_intact() -> None:
    sample, errors = _sample(per_instance=False)
    instances = sample.gpus[0].instances
    assert all(m.pcie_rx_bytes_per_second is None and m.pcie_tx_bytes_per_second is None for m in instances)
    assert all(m.dram_bw_util is not None for m in instances)
    assert errors.get("gpm_metric_unavailable", 0) > 0  # counted, never raised
    assert sample.gpus[0].pcie_rx_bytes_per_second == pytest.approx(6.0e9, rel=1e-3)  # the whole GPU still known


@pytest.mark.parametrize(
    ("generation", "width", "expected"),
    [(3, 16, 8e9 * 128 / 130 / 8 * 16), (4, 8, 16e9 * 128 / 130), (1, 1, 2.5e9 * 8 / 10 / 8), (5, 16, GEN5_X16)],
)
def test_link_capacity_follows_the_pcie_spec_per_lane_rates(generation: int, width: int, expected: float) -> None:
    assert link_bytes_per_second(generation, width) == pytest.approx(expected)


@pytest.mark.parametrize(("generation", "width"), [(None, 16), (4, None), (9, 16), (4, 0)])
def test_an_unknown_generation_or_width_gives_no_capacity_rather_than_a_guess(generation, width) -> None:
    assert link_bytes_per_second(generation, width) is None
