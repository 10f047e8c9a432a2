"""The time-slicing scheduler models of the simulator: max-min fair round-robin (default) and proportional shares."""

from __future__ import annotations

import pytest

from watchdog.sampling import nvml_library
from watchdog.testbed import ScenarioError, SimClock, SimulatedGpuNode, load_scenario
from watchdog.testbed.contention import proportional_share

pynvml = nvml_library.load()


def two_pods(scheduler: str | None) -> dict:
    gpu = {"model": "A100-SXM4-40GB", "replicas": 2}
    if scheduler is not None:
        gpu["scheduler"] = scheduler
    return {
        "name": "t", "seed": 5, "tick_seconds": 1.0, "gpus": [gpu],
        "pods": [
            {"namespace": "prod", "name": "serve", "device": {"gpu": 0}, "workload": {"sm": {"base": 0.4}}},
            {"namespace": "batch", "name": "hog", "device": {"gpu": 0}, "workload": {"sm": {"base": 1.0}}},
        ],
    }


def sm_percent(scheduler: str | None) -> dict[str, int]:
    node = SimulatedGpuNode.from_scenario(two_pods(scheduler), SimClock())
    try:
        node.nvml.nvmlInit()
        handle = node.nvml.nvmlDeviceGetHandleByIndex(0)
        pods = {p.pid: p.pod for p in node.processes()}
        return {pods[s.pid]: s.smUtil for s in node.nvml.nvmlDeviceGetProcessUtilization(handle, 0)}
    finally:
        node.close()


def test_proportional_shares_follow_demand_once_the_total_exceeds_the_capacity():
    assert proportional_share([0.4, 1.0]) == pytest.approx([0.4 / 1.4, 1.0 / 1.4])
    assert proportional_share([0.3, 0.5]) == pytest.approx([0.3, 0.5])  # fits: everybody gets its demand
    assert proportional_share([0.0, 2.0, -1.0]) == pytest.approx([0.0, 1.0, 0.0])


def test_round_robin_is_the_default_and_leaves_a_modest_pod_its_demand():
    # Two contexts lose 0.03 of the GPU to switching (the default overhead): hog gets the 0.57 serve leaves.
    assert sm_percent(None) == sm_percent("roundrobin") == {"serve": 40, "hog": 57}


def test_a_proportional_gpu_squeezes_the_modest_pod_below_its_fair_share():
    assert sm_percent("proportional") == {"serve": 28, "hog": 69}  # 0.4 and 1.0 × 0.97 / 1.4, rounded


def test_an_unknown_scheduler_is_a_scenario_error_naming_the_field():
    with pytest.raises(ScenarioError, match="scheduler"):
        load_scenario(two_pods("fifo"))
