"""The simulated PCIe link: one per GPU for all MIG instances; a full link slows an input-bound pod's SMs."""

from __future__ import annotations

import pytest

from watchdog.testbed import SimClock, SimulatedGpuNode
from watchdog.testbed.scenario import Scenario

LINK = 50e9  # the H100 model's usable rate per direction


def _node(*, train_input_bound: bool) -> SimulatedGpuNode:
    scenario = Scenario.model_validate({
        "name": "link",
        "gpus": [{"model": "H100-80GB-HBM3", "mig": ["3g.40gb", "2g.20gb", "1g.10gb"]}],
        "pods": [
            {"namespace": "batch", "name": "loader", "device": {"gpu": 0, "instance": 0},
             "workload": {"sm": {"base": 0.3}, "pcie": {"base": 60e9}}},
            {"namespace": "prod", "name": "train", "device": {"gpu": 0, "instance": 1},
             "workload": {"sm": {"base": 0.8}, "pcie": {"base": 12e9}, "input_bound": train_input_bound}},
            {"namespace": "lab", "name": "notebook", "device": {"gpu": 0, "instance": 2},
             "workload": {"sm": {"base": 0.5}}},
        ],
    })
    return SimulatedGpuNode.from_scenario(scenario, SimClock())


def _by_pod(node: SimulatedGpuNode):
    state = node.state(0).gpus[0]
    return state, {p.pod.name: (domain, p) for domain in state.instances.values() for p in domain.processes}


def test_a_full_link_shares_out_proportionally_and_starves_the_input_bound_pod() -> None:
    node = _node(train_input_bound=True)
    try:
        state, pods = _by_pod(node)
        delivered = LINK / 72e9
        assert state.pcie_rx_bytes == pytest.approx(LINK)
        assert pods["loader"][0].pcie_rx == pytest.approx(60e9 * delivered)  # per GPU instance, for GPM
        train_domain, train = pods["train"]
        assert train_domain.pcie_rx == pytest.approx(12e9 * delivered)
        assert train.sm == pytest.approx(0.8 * delivered) and train_domain.busy == pytest.approx(0.8 * delivered)
        assert pods["loader"][1].sm == pytest.approx(0.3)  # not input-bound: its copies are slower, its SMs not
        assert pods["notebook"][1].sm == pytest.approx(0.5)
    finally:
        node.close()


def test_a_pod_that_is_not_input_bound_keeps_its_sm_share_on_a_full_link() -> None:
    node = _node(train_input_bound=False)
    try:
        _, pods = _by_pod(node)
        assert pods["train"][1].sm == pytest.approx(0.8)
    finally:
        node.close()
