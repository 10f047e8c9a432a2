"""The simulator's sharing physics: context-switch overhead under time-slicing, and MPS clients under the device
plugin's limits (testbed/contention.py), read back through the simulated NVML as the agent reads them."""

from __future__ import annotations

import pytest

from watchdog.testbed import SimClock, SimulatedGpuNode
from watchdog.testbed.contention import MAX_SWITCHING, SWITCHES_PER_SECOND_PER_CONTEXT, mps_share, switching

GIB = 1 << 30


def test_switching_costs_grow_with_the_contexts_that_have_work():
    assert switching([0.9], per_context=0.03) == (0.0, 0.0)  # a lone context is never switched out
    assert switching([0.5, 0.0, 0.0], per_context=0.03) == (0.0, 0.0)  # idle contexts are not switched to
    lost, rate = switching([0.5, 0.5, 0.5], per_context=0.03)
    assert lost == pytest.approx(0.06) and rate == 3 * SWITCHES_PER_SECOND_PER_CONTEXT
    assert switching([0.1] * 40, per_context=0.05)[0] == MAX_SWITCHING
    assert switching([0.5, 0.5], per_context=0.0) == (0.0, 0.0)


def test_mps_clients_keep_their_sm_slice_and_share_dram_bandwidth():
    # Four replicas: each client at most 0.25 of the SMs, whatever it asks and whatever the others leave idle.
    sm, dram, slowdown = mps_share([0.5, 0.1], [0.2, 0.2], replicas=4)
    assert sm == pytest.approx([0.25, 0.1]) and dram == pytest.approx([0.2, 0.2]) and slowdown == [1.0, 1.0]
    # A bandwidth hog next to a modest client: past the capacity each gets bandwidth in proportion to what it asks,
    # so the modest client, granted less than it asks, gets proportionally less done in its SM time.
    sm, dram, slowdown = mps_share([0.2, 0.25], [0.3, 1.0], replicas=4)
    assert dram == pytest.approx([0.3 / 1.3, 1.0 / 1.3]) and slowdown == pytest.approx([1.3, 1.3])
    assert sm == pytest.approx([0.2 / 1.3, 0.25 / 1.3])


def _node(gpu: dict, pods: list[dict]) -> SimulatedGpuNode:
    scenario = {"name": "t", "seed": 7, "tick_seconds": 1.0, "gpus": [gpu], "pods": pods}
    node = SimulatedGpuNode.from_scenario(scenario, SimClock())
    node.nvml.nvmlInit()
    return node


def _pod(namespace: str, sm: float, memory: str = "4Gi", dram: float = 0.1) -> dict:
    return {"namespace": namespace, "name": "p", "device": {"gpu": 0},
            "workload": {"sm": {"base": sm}, "memory": {"base": memory}, "dram": {"base": dram}}}


def test_a_timesliced_gpu_reads_full_while_its_shares_sum_below_one():
    node = _node({"model": "A100-SXM4-40GB", "replicas": 3, "context_switch_overhead": 0.05},
                 [_pod("a", 1.0), _pod("b", 1.0), _pod("c", 1.0)])
    try:
        handle = node.nvml.nvmlDeviceGetHandleByIndex(0)
        shares = [s.smUtil for s in node.nvml.nvmlDeviceGetProcessUtilization(handle, 0)]
        assert node.nvml.nvmlDeviceGetUtilizationRates(handle).gpu == 100
        assert sum(shares) == 90  # 0.10 of the time went to switching between three contexts
        whole = node.state().gpus[0].whole
        assert whole.switching == pytest.approx(0.1) and whole.switches_per_second > 0
    finally:
        node.close()


def test_mps_clients_switch_nothing_and_are_held_to_the_plugins_limits():
    # H100 80 GB, 4 replicas: 0.25 of the SMs and the GPU's memory / 4 (19.9 GiB) per client.
    node = _node({"model": "H100-80GB-HBM3", "replicas": 4, "mps": True},
                 [_pod("a", 0.9, memory="30Gi"), _pod("b", 0.1, memory="8Gi")])
    try:
        state = node.state().gpus[0]
        by_ns = {p.pod.namespace: p for p in state.whole.processes}
        assert state.whole.switching == 0.0
        assert by_ns["a"].sm == pytest.approx(0.25) and by_ns["b"].sm == pytest.approx(0.1)
        assert by_ns["a"].memory_used < 20 * GIB and by_ns["b"].memory_used == 8 * GIB
        [failure] = node.state().allocation_failures  # a's allocation past its pinned limit fails, nobody else's
        assert failure.pod == "a/p" and failure.requested == 30 * GIB
    finally:
        node.close()
