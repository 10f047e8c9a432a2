"""The offline evaluation tells detection how each GPU is shared, as the live agent does (attribution/sharing.py)."""

from __future__ import annotations

from watchdog.config import Policy
from watchdog.evaluation import simulate
from watchdog.evaluation.scenario_run import run_scenario
from watchdog.model import DeviceSharing
from tests.sharing_scenario import SCENARIO
from watchdog.testbed import SimClock, SimulatedGpuNode



def uuids() -> list[str]:
    node = SimulatedGpuNode.from_scenario(SCENARIO, SimClock())
    try:
        return list(node.gpu_uuids)
    finally:
        node.close()


def test_every_tick_carries_the_mps_gpus_replicas_and_strategy():
    shared, plain = uuids()
    ticks = list(simulate(SCENARIO))
    assert len(ticks) == SCENARIO["duration_ticks"]
    for _, attribution in ticks:
        assert dict(attribution.sharing) == {shared: DeviceSharing(4, "mps", "kubelet+labels")}
        assert plain not in attribution.sharing
    assert ticks[0][1].sharing is ticks[-1][1].sharing  # computed once while nothing changes


def test_eval_hands_detection_the_same_attribution():
    shared, _ = uuids()
    steps = list(run_scenario(SCENARIO, policy=Policy()))
    assert steps and all(step.attribution.sharing[shared].strategy == "mps" for step in steps)


def test_time_slicing_replicas_without_mps():
    scenario = {**SCENARIO, "gpus": [{"model": "H100-80GB-HBM3", "replicas": 2}, {"model": "H100-80GB-HBM3"}]}
    _, attribution = next(iter(simulate(scenario)))
    [(_, sharing)] = attribution.sharing.items()
    assert sharing == DeviceSharing(2, "time-slicing", "kubelet+labels")


def test_a_scenario_without_replicas_shares_nothing():
    scenario = {**SCENARIO, "gpus": [{"model": "H100-80GB-HBM3", "mps": True}, {"model": "H100-80GB-HBM3"}]}
    _, attribution = next(iter(simulate(scenario)))
    assert not attribution.sharing
