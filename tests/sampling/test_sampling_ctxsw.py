"""Context switching from GPM (GR0_CTXSW_ACTIVE_PCT and _REQUESTS, NVML 12.9+): read in the GPM requests the sampler
already makes, the request count turned into a rate over the seconds between the two samples, and left out of a
device's requests for good once its driver refuses them, without costing the other metrics or an error per tick."""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterator

import pytest
from sampling_helpers import run_ticks

from watchdog.config.sampling import SamplingSettings
from watchdog.sampling import NvmlSampler
from watchdog.sampling.gpm import CTXSW
from watchdog.testbed import SimClock, SimulatedGpuNode

BUSY = {"sm": {"base": 0.6}, "dram": {"base": 0.2}, "memory": {"base": "2Gi"}, "pcie": {"base": 1.0e9}}


def scenario(*, ctxsw: bool) -> dict:
    pods = [{"namespace": "t", "name": f"ts-{n}", "device": {"gpu": 0}, "workload": BUSY} for n in range(3)]
    pods += [{"namespace": "m", "name": f"mig-{n}", "device": {"gpu": 1, "instance": 0}, "workload": BUSY}
             for n in range(2)]
    return {"name": "ctxsw", "seed": 11, "tick_seconds": 1.0,
            "gpus": [{"model": "H100-80GB-HBM3", "replicas": 4, "gpm_ctxsw": ctxsw},
                     {"model": "H100-80GB-HBM3", "mig": ["3g.40gb", "3g.40gb"], "gpm_ctxsw": ctxsw}],
            "pods": pods}


class Recording:
    """The simulated module, with every nvmlGpmMetricsGet's metric ids and every call's name recorded."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self.requests: list[tuple[int, ...]] = []
        self.calls: Counter = Counter()

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._nvml, name)
        if not (name.startswith("nvml") and callable(target)) or isinstance(target, type):
            return target

        def recorded(*args: Any) -> Any:
            self.calls[name] += 1
            if name == "nvmlGpmMetricsGet":
                self.requests.append(tuple(args[0].metrics[i].metricId for i in range(args[0].numMetrics)))
            return target(*args)

        return recorded


@pytest.fixture
def run() -> Iterator:
    opened = []

    def start(*, ctxsw: bool = True) -> tuple[SimulatedGpuNode, NvmlSampler, Recording, SimClock]:
        clock = SimClock()
        node = SimulatedGpuNode.from_scenario(scenario(ctxsw=ctxsw), clock)
        recording = Recording(node.nvml)
        sampler = NvmlSampler(recording, node="n", clock=clock, settings=SamplingSettings())  # type: ignore[arg-type]
        sampler.open()
        opened.append((node, sampler))
        return node, sampler, recording, clock

    yield start
    for node, sampler in opened:
        sampler.close()
        node.close()


def test_the_whole_gpu_and_each_gpu_instance_read_their_switching(run) -> None:
    node, sampler, _, clock = run()
    sample = run_ticks(sampler, clock, 4)
    state = node.state(2)  # the simulation is steady: every tick alike
    time_sliced, mig_gpu = sample.gpus
    assert time_sliced.ctxsw_active == pytest.approx(state.gpus[0].whole.switching) and time_sliced.ctxsw_active > 0
    assert time_sliced.ctxsw_per_second == pytest.approx(state.gpus[0].whole.switches_per_second, abs=1.0)
    assert mig_gpu.ctxsw_active is None and mig_gpu.ctxsw_per_second is None  # no whole-GPU GPM in MIG mode
    busy, idle = mig_gpu.instances
    slot = node.layout(1).instances[0].slot
    assert busy.ctxsw_active == pytest.approx(state.gpus[1].instances[slot].switching) and busy.ctxsw_active > 0
    assert busy.ctxsw_per_second == pytest.approx(state.gpus[1].instances[slot].switches_per_second, abs=1.0)
    assert (idle.ctxsw_active, idle.ctxsw_per_second) == (0.0, 0.0)
    assert sampler.error_counts() == {}


@pytest.mark.parametrize("steps", [(2.0, 2.0, 2.0), (1.0, 3.0, 0.5, 2.5)])
def test_requests_become_a_rate_over_the_seconds_between_the_two_samples(run, steps) -> None:
    node, sampler, _, clock = run()
    expected = node.state(0).gpus[0].whole.switches_per_second
    for tick, step in enumerate(steps):
        sample = sampler.sample(tick)
        if tick:  # a diff over the `steps[tick - 1]` seconds since the previous sample
            assert sample.gpus[0].ctxsw_per_second == pytest.approx(expected, rel=1e-3)
        clock.advance(step)


def test_an_old_driver_is_asked_once_then_never_again_and_the_other_metrics_keep_working(run) -> None:
    _, sampler, recording, clock = run(ctxsw=False)
    run_ticks(sampler, clock, 2)  # the first diff of each stream: the driver refuses the CTXSW slots
    asked_first = [request for request in recording.requests if set(CTXSW) & set(request)]
    recording.requests.clear()

    sample = run_ticks(sampler, clock, 5, first=2)

    assert asked_first  # asked, in the requests already made
    assert not [request for request in recording.requests if set(CTXSW) & set(request)]  # and never again
    time_sliced, mig_gpu = sample.gpus
    assert time_sliced.ctxsw_active is None and time_sliced.ctxsw_per_second is None
    assert time_sliced.sm_util is not None and time_sliced.dram_bw_util is not None
    for mig in mig_gpu.instances:
        assert mig.ctxsw_active is None and mig.ctxsw_per_second is None
        assert mig.dram_bw_util is not None and mig.pcie_rx_bytes_per_second is not None
    assert "gpm_metric_unavailable" not in sampler.error_counts()  # a capability, not an error per tick


def test_the_switching_readings_cost_no_nvml_call(run) -> None:
    calls = {}
    for ctxsw in (True, False):
        _, sampler, recording, clock = run(ctxsw=ctxsw)
        run_ticks(sampler, clock, 3)
        recording.calls.clear()
        run_ticks(sampler, clock, 4, first=3)
        calls[ctxsw] = recording.calls
    assert calls[True] == calls[False]
    # one metrics request per GPM stream and tick: the whole time-sliced GPU, and per MIG device its GI and its CI
    assert calls[True]["nvmlGpmMetricsGet"] == 4 * (1 + 2 + 2)
