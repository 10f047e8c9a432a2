"""The simulated GPM context-switch counters (GR0_CTXSW_*, NVML 12.9+): what the simulated switching reads as, per
whole GPU and per GPU instance, consistent among themselves, and NotSupported slot by slot on an older driver."""

from __future__ import annotations

import pytest

from watchdog.sampling import nvml_library
from watchdog.testbed import SimClock, SimulatedGpuNode
from tests.testbed.gpm_requests import read_metrics

pynvml = nvml_library.load()
ELAPSED = pynvml.NVML_GPM_METRIC_GR0_CTXSW_CYCLES_ELAPSED
ACTIVE = pynvml.NVML_GPM_METRIC_GR0_CTXSW_CYCLES_ACTIVE
REQUESTS = pynvml.NVML_GPM_METRIC_GR0_CTXSW_REQUESTS
PER_REQ = pynvml.NVML_GPM_METRIC_GR0_CTXSW_CYCLES_PER_REQ
ACTIVE_PCT = pynvml.NVML_GPM_METRIC_GR0_CTXSW_ACTIVE_PCT
GR0 = (ELAPSED, ACTIVE, REQUESTS, PER_REQ, ACTIVE_PCT)
OTHER_ENGINES = tuple(range(pynvml.NVML_GPM_METRIC_GR1_CTXSW_CYCLES_ELAPSED,
                            pynvml.NVML_GPM_METRIC_GR7_CTXSW_ACTIVE_PCT + 1))
BUSY = {"sm": {"base": 0.6}, "memory": {"base": "2Gi"}}


def scenario(*, ctxsw: bool = True, time_sliced_pods: int = 3) -> dict:
    pods = [{"namespace": "t", "name": f"ts-{n}", "device": {"gpu": 0}, "workload": BUSY}
            for n in range(time_sliced_pods)]
    pods += [{"namespace": "m", "name": f"mig-{n}", "device": {"gpu": 1, "instance": 0}, "workload": BUSY}
             for n in range(2)]
    return {"name": "ctxsw", "seed": 7, "tick_seconds": 1.0,
            "gpus": [{"model": "H100-80GB-HBM3", "replicas": 4, "gpm_ctxsw": ctxsw},
                     {"model": "H100-80GB-HBM3", "mig": ["3g.40gb", "3g.40gb"], "gpm_ctxsw": ctxsw}],
            "pods": pods}


@pytest.fixture
def make():
    nodes = []

    def build(**kwargs) -> SimulatedGpuNode:
        node = SimulatedGpuNode.from_scenario(scenario(**kwargs), SimClock())
        node.nvml.nvmlInit()
        nodes.append(node)
        return node

    yield build
    for node in nodes:
        node.close()


def gpm(node: SimulatedGpuNode, take, metrics: tuple[int, ...], *, seconds: float = 2.0) -> list:
    """(nvmlReturn, value, shortName) per metric over ``seconds`` of simulated time."""

    def later(sample):
        node.clock.advance(seconds)
        take(sample)

    return read_metrics(node.nvml, take, later, metrics)


def test_a_time_sliced_gpu_reads_its_switching_and_the_counters_agree(make) -> None:
    node = make()
    state = node.state().gpus[0]
    assert state.whole.switching > 0 and state.whole.switches_per_second > 0  # three busy contexts
    parent = node.nvml.nvmlDeviceGetHandleByIndex(0)

    answers = gpm(node, lambda s: node.nvml.nvmlGpmSampleGet(parent, s), GR0 + (pynvml.NVML_GPM_METRIC_SM_UTIL,))

    assert all(code == pynvml.NVML_SUCCESS for code, _, _ in answers)
    elapsed, active, requests, per_req, pct = (value for _, value, _ in answers[:5])
    assert pct == pytest.approx(100.0 * state.whole.switching)
    assert requests == round(state.whole.switches_per_second * 2.0)  # a count over the 2 s between the samples
    assert elapsed == pytest.approx(state.sm_clock_mhz * 1e6 * 2.0)  # cycles at the SM clock
    assert active == pytest.approx(elapsed * pct / 100.0)
    assert per_req == pytest.approx(active / requests)
    assert answers[3][2] == b"gr0_ctxsw_cycles_per_req" and answers[4][2] == b"gr0_ctxsw_active_pct"


def test_a_gpu_instance_reads_its_own_switching_through_the_mig_sample(make) -> None:
    node = make()
    parent = node.nvml.nvmlDeviceGetHandleByIndex(1)
    busy, idle = node.layout(1).instances  # two pods on the first instance, none on the second
    state = node.state().gpus[1]

    shared = gpm(node, lambda s: node.nvml.nvmlGpmMigSampleGet(parent, busy.gpu_instance, s), (ACTIVE_PCT, REQUESTS))
    alone = gpm(node, lambda s: node.nvml.nvmlGpmMigSampleGet(parent, idle.gpu_instance, s), (ACTIVE_PCT, REQUESTS,
                                                                                              PER_REQ))

    assert shared[0][1] == pytest.approx(100.0 * state.instances[busy.slot].switching) and shared[0][1] > 0
    assert shared[1][1] == round(state.instances[busy.slot].switches_per_second * 2.0) > 0
    assert [value for _, value, _ in alone] == [0.0, 0.0, 0.0]  # nothing to switch: no division by zero either


def test_a_lone_context_is_never_switched_out(make) -> None:
    node = make(time_sliced_pods=1)
    parent = node.nvml.nvmlDeviceGetHandleByIndex(0)
    answers = gpm(node, lambda s: node.nvml.nvmlGpmSampleGet(parent, s), (ACTIVE_PCT, REQUESTS, ELAPSED))
    assert [value for _, value, _ in answers[:2]] == [0.0, 0.0] and answers[2][1] > 0


def test_other_graphics_engines_answer_not_supported_per_slot(make) -> None:
    node = make()
    parent = node.nvml.nvmlDeviceGetHandleByIndex(0)
    answers = gpm(node, lambda s: node.nvml.nvmlGpmSampleGet(parent, s), (ACTIVE_PCT,) + OTHER_ENGINES)
    assert answers[0][0] == pynvml.NVML_SUCCESS
    assert {code for code, _, _ in answers[1:]} == {pynvml.NVML_ERROR_NOT_SUPPORTED}


@pytest.mark.parametrize("gpu", [0, 1])
def test_a_driver_before_12_9_refuses_every_ctxsw_slot_and_answers_the_rest(make, gpu: int) -> None:
    node = make(ctxsw=False)
    parent = node.nvml.nvmlDeviceGetHandleByIndex(gpu)

    def take(sample):  # the whole GPU, or the first GPU instance of the MIG GPU
        if gpu == 0:
            return node.nvml.nvmlGpmSampleGet(parent, sample)
        return node.nvml.nvmlGpmMigSampleGet(parent, node.layout(1).instances[0].gpu_instance, sample)

    answers = gpm(node, take, (pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,) + GR0 + OTHER_ENGINES)

    assert answers[0][0] == pynvml.NVML_SUCCESS
    assert {code for code, _, _ in answers[1:]} == {pynvml.NVML_ERROR_NOT_SUPPORTED}
