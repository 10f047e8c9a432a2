"""Behaviour of the simulated node: contention, power capping, MIG layout, GPM, faults and determinism."""

from __future__ import annotations

import pytest

from watchdog.sampling import nvml_library
from watchdog.testbed import SimClock, SimulatedGpuNode
from watchdog.testbed.contention import allocate_memory, water_fill
from tests.testbed.gpm_requests import read_metrics

pynvml = nvml_library.load()
GIB = 1 << 30


def scenario(**overrides) -> dict:
    base = {
        "name": "t", "seed": 3, "tick_seconds": 1.0,
        "gpus": [{"model": "H100-80GB-HBM3", "mig": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]},
                 {"model": "A100-SXM4-40GB", "replicas": 4}],
        "pods": [
            {"namespace": "a", "name": "big", "device": {"gpu": 0, "instance": 0},
             "workload": {"sm": {"base": 1.0}, "dram": {"base": 0.5}, "memory": {"base": "10Gi"}}},
            {"namespace": "b", "name": "victim", "device": {"gpu": 0, "instance": 1},
             "workload": {"sm": {"base": 1.0}, "memory": {"base": "4Gi"}}},
            {"namespace": "c", "name": "greedy", "device": {"gpu": 1},
             "workload": {"sm": {"base": 0.9}, "dram": {"base": 0.9}, "memory": {"base": "30Gi"}}},
            {"namespace": "d", "name": "small", "device": {"gpu": 1},
             "workload": {"sm": {"base": 0.2}, "dram": {"base": 0.1}, "memory": {"base": "8Gi"}}},
            {"namespace": "e", "name": "mid", "device": {"gpu": 1},
             "workload": {"sm": {"base": 0.5}, "memory": {"base": "8Gi"}}},
        ],
    }
    base.update(overrides)
    return base


@pytest.fixture
def node():
    sim = SimulatedGpuNode.from_scenario(scenario(), SimClock())
    sim.nvml.nvmlInit()
    yield sim
    sim.close()


def test_water_filling_gives_fair_shares_and_redistributes_leftovers():
    assert water_fill([0.2, 0.9, 0.5]) == pytest.approx([0.2, 0.4, 0.4])
    assert water_fill([0.1, 0.2]) == pytest.approx([0.1, 0.2])
    assert water_fill([0.0, 1.0]) == pytest.approx([0.0, 1.0])
    assert sum(water_fill([0.6, 0.6, 0.6, 0.6])) == pytest.approx(1.0)


def test_memory_is_first_come_first_served_and_never_exceeds_capacity():
    assert allocate_memory([6, 5, 3], 10) == [6, 4, 0]


def test_time_sliced_gpu_reports_achieved_shares_per_process(node):
    nvml = node.nvml
    a100 = nvml.nvmlDeviceGetHandleByIndex(1)
    by_pid = {s.pid: s for s in nvml.nvmlDeviceGetProcessUtilization(a100, 0)}
    pids = {p.pod: p.pid for p in node.processes()}
    # Three contexts with work lose 2 × 0.03 of the GPU's time to switching (the default context_switch_overhead):
    # small gets its 0.2, greedy and mid split the 0.74 left, and the shares sum to 0.94 while the GPU reads 100 %.
    assert by_pid[pids["small"]].smUtil == 20
    assert by_pid[pids["greedy"]].smUtil == 37 and by_pid[pids["mid"]].smUtil == 37
    assert nvml.nvmlDeviceGetUtilizationRates(a100).gpu == 100
    assert by_pid[pids["greedy"]].memUtil == 90  # DRAM left over by the others goes to the greedy one
    memory = nvml.nvmlDeviceGetMemoryInfo(a100, pynvml.nvmlMemory_v2)
    assert memory.total == 40 * GIB and memory.free == 0  # 30 + 8 + 8 GiB asked of 40: the last one is cut short
    assert memory.used + memory.reserved == memory.total
    failures = node.state().allocation_failures
    assert [f.pod for f in failures] == ["e/mid"] and failures[0].requested == 8 * GIB


def test_process_utilization_only_returns_newer_samples(node):
    nvml = node.nvml
    a100 = nvml.nvmlDeviceGetHandleByIndex(1)
    node.clock.advance(5)
    stamp = nvml.nvmlDeviceGetProcessUtilization(a100, 0)[0].timeStamp
    assert stamp == 5_000_000
    with pytest.raises(pynvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetProcessUtilization(a100, stamp)
    node.clock.advance(1)
    assert nvml.nvmlDeviceGetProcessUtilization(a100, stamp)[0].timeStamp == 6_000_000


def test_power_cap_slows_every_instance_of_the_gpu():
    capped = SimulatedGpuNode.from_scenario(scenario(gpus=[{"model": "H100-80GB-HBM3", "power_limit_watts": 300,
                                                         "mig": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]},
                                                        {"model": "A100-SXM4-40GB"}]), SimClock())
    free = SimulatedGpuNode.from_scenario(scenario(), SimClock())
    for sim in (capped, free):
        sim.nvml.nvmlInit()
    hot, cool = capped.nvml, free.nvml
    hot_gpu, cool_gpu = hot.nvmlDeviceGetHandleByIndex(0), cool.nvmlDeviceGetHandleByIndex(0)
    assert hot.nvmlDeviceGetCurrentClocksEventReasons(hot_gpu) & pynvml.nvmlClocksEventReasonSwPowerCap
    assert not cool.nvmlDeviceGetCurrentClocksEventReasons(cool_gpu) & pynvml.nvmlClocksEventReasonSwPowerCap
    assert hot.nvmlDeviceGetPowerUsage(hot_gpu) <= hot.nvmlDeviceGetEnforcedPowerLimit(hot_gpu) == 300_000
    clock = hot.nvmlDeviceGetClockInfo(hot_gpu, pynvml.NVML_CLOCK_SM)
    assert clock < hot.nvmlDeviceGetMaxClockInfo(hot_gpu, pynvml.NVML_CLOCK_SM) == 1980 and clock % 15 == 0
    victim_hot = capped.state().gpus[0].instances[4]  # 2g.20gb sits at slot 4
    victim_cool = free.state().gpus[0].instances[4]
    assert victim_hot.busy == victim_cool.busy == 1.0  # MIG isolates SM time …
    assert victim_hot.sm == pytest.approx(clock / 1980) and victim_cool.sm == 1.0  # … but not the clock
    assert hot.nvmlDeviceGetTemperature(hot_gpu, pynvml.NVML_TEMPERATURE_GPU) < cool.nvmlDeviceGetTemperature(
        cool_gpu, pynvml.NVML_TEMPERATURE_GPU)
    capped.close()
    free.close()


def test_mig_slots_are_sparse_and_instances_isolated(node):
    nvml = node.nvml
    gpu = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetMaxMigDeviceCount(gpu) == 7
    found = {}
    for slot in range(7):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, slot)
        except pynvml.NVMLError_NotFound:
            continue
        found[slot] = nvml.nvmlDeviceGetName(mig).split(" MIG ")[1]
        assert nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig).contents is not None
        assert nvml.nvmlDeviceGetUUID(mig).startswith("MIG-")
    assert found == {0: "3g.40gb", 3: "1g.10gb", 4: "2g.20gb", 6: "1g.10gb"}
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetUtilizationRates(gpu)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetProcessUtilization(gpu, 0)
    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
    attributes = nvml.nvmlDeviceGetAttributes(mig)
    assert (attributes.multiprocessorCount, attributes.gpuInstanceSliceCount) == (60, 3)
    process = nvml.nvmlDeviceGetComputeRunningProcesses(mig)[0]
    assert (process.gpuInstanceId, process.usedGpuMemory) == (nvml.nvmlDeviceGetGpuInstanceId(mig), 10 * GIB)
    assert len(nvml.nvmlDeviceGetComputeRunningProcesses(gpu)) == 2  # the parent lists every instance's


def _gpm(nvml, take_first, take_second, metrics):
    return [(status, value) for status, value, _ in read_metrics(nvml, take_first, take_second, metrics)]


def test_gpm_averages_over_the_interval_between_samples():
    curve = {"sm": {"base": 0.2, "steps": [{"at": 2, "value": 0.6}]}, "dram": {"base": 0.3}}
    sim = SimulatedGpuNode.from_scenario(scenario(pods=[{"namespace": "a", "name": "p", "device": {"gpu": 0,
                                                      "instance": 0}, "workload": curve}]), SimClock(1.5))
    nvml = sim.nvml
    nvml.nvmlInit()
    parent = nvml.nvmlDeviceGetHandleByIndex(0)
    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    gi = nvml.nvmlDeviceGetGpuInstanceId(mig)
    # 1.5 → 3.5: half a tick at 0.2, then 1.5 ticks at 0.6 → average 0.5
    values = _gpm(nvml, lambda s: nvml.nvmlGpmSampleGet(mig, s),
                  lambda s: (sim.clock.advance(2.0), nvml.nvmlGpmSampleGet(mig, s)),
                  [pynvml.NVML_GPM_METRIC_SM_UTIL, pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL, 9999])
    assert values[0] == (pynvml.NVML_SUCCESS, pytest.approx(50.0))
    assert values[1] == (pynvml.NVML_SUCCESS, pytest.approx(50.0))
    assert values[2][0] == pynvml.NVML_ERROR_NOT_SUPPORTED
    dram = _gpm(nvml, lambda s: nvml.nvmlGpmMigSampleGet(parent, gi, s),
                lambda s: (sim.clock.advance(1.0), nvml.nvmlGpmMigSampleGet(parent, gi, s)),
                [pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL])
    assert dram == [(pynvml.NVML_SUCCESS, pytest.approx(30.0))]
    request = pynvml.c_nvmlGpmMetricsGet_t()  # version left at 0, as pynvml leaves it
    request.numMetrics = 1
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        nvml.nvmlGpmMetricsGet(request)
    sim.close()


def test_a100_has_no_gpm(node):
    nvml = node.nvml
    a100 = nvml.nvmlDeviceGetHandleByIndex(1)
    assert nvml.nvmlGpmQueryDeviceSupport(a100).isSupportedDevice == 0
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlGpmSampleGet(a100, nvml.nvmlGpmSampleAlloc())


def test_reconfiguration_makes_old_handles_stale_and_emits_an_event(node):
    nvml = node.nvml
    gpu = nvml.nvmlDeviceGetHandleByIndex(0)
    events = nvml.nvmlEventSetCreate()
    nvml.nvmlDeviceRegisterEvents(gpu, pynvml.nvmlEventMigConfigChange, events)
    old = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
    old_uuid = nvml.nvmlDeviceGetUUID(old)
    node.reconfigure_mig(0, ["7g.80gb"])
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetUUID(old)
    new = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
    assert nvml.nvmlDeviceGetUUID(new) != old_uuid
    assert nvml.nvmlDeviceGetName(new).endswith("MIG 7g.80gb") and nvml.nvmlDeviceGetGpuInstanceId(new) == 0
    event = nvml.nvmlEventSetWait_v2(events, 10)
    assert event.eventType == pynvml.nvmlEventMigConfigChange and event.eventData == 0
    assert node.layout(0).generation == 1
    with pytest.raises(ValueError, match="1g.10gb: the instances need more than 8 memory slices"):
        node.reconfigure_mig(0, ["7g.80gb", "1g.10gb"])


def test_xid_events_carry_the_instance_and_wait_times_out(node):
    nvml = node.nvml
    gpu = nvml.nvmlDeviceGetHandleByIndex(0)
    events = nvml.nvmlEventSetCreate()
    nvml.nvmlDeviceRegisterEvents(gpu, pynvml.nvmlEventTypeXidCriticalError, events)
    with pytest.raises(pynvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait_v2(events, 5)
    node.push_xid(0, 13, instance=1)
    node.push_xid(0, 79)
    first = nvml.nvmlEventSetWait(events, 5)
    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 4)
    assert (first.eventData, first.gpuInstanceId) == (13, nvml.nvmlDeviceGetGpuInstanceId(mig))
    assert nvml.nvmlDeviceGetIndex(first.device) == 0
    second = nvml.nvmlEventSetWait_v2(events, 5)
    assert (second.eventData, second.gpuInstanceId, second.computeInstanceId) == (79, 0xFFFFFFFF, 0xFFFFFFFF)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceRegisterEvents(mig, pynvml.nvmlEventTypeXidCriticalError, events)
    nvml.nvmlEventSetFree(events)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlEventSetWait_v2(events, 5)


def test_scheduled_xid_arrives_when_the_clock_passes_it():
    sim = SimulatedGpuNode.from_scenario(scenario(xids=[{"at": 20, "gpu": 1, "xid": 48}]), SimClock())
    nvml = sim.nvml
    nvml.nvmlInit()
    events = nvml.nvmlEventSetCreate()
    nvml.nvmlDeviceRegisterEvents(nvml.nvmlDeviceGetHandleByIndex(1), pynvml.nvmlEventTypeXidCriticalError, events)
    sim.clock.advance(19)
    with pytest.raises(pynvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait_v2(events, 1)
    sim.clock.advance(1)
    assert nvml.nvmlEventSetWait_v2(events, 1).eventData == 48
    sim.close()


def test_injected_errors_lost_gpu_and_missing_symbols(node):
    nvml = node.nvml
    gpu = nvml.nvmlDeviceGetHandleByIndex(1)
    node.inject_error("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_UNKNOWN, device_index=1, times=2)
    for _ in range(2):
        with pytest.raises(pynvml.NVMLError_Unknown):
            nvml.nvmlDeviceGetPowerUsage(gpu)
    assert nvml.nvmlDeviceGetPowerUsage(gpu) > 0
    assert nvml.nvmlDeviceGetPowerUsage(nvml.nvmlDeviceGetHandleByIndex(0)) > 0
    node.compute_processes_v3_missing = True
    with pytest.raises(pynvml.NVMLLibraryMismatchError):
        nvml.nvmlDeviceGetComputeRunningProcesses(gpu)
    assert len(nvml.nvmlDeviceGetComputeRunningProcesses_v2(gpu)) == 3
    node.clock_event_reasons_missing = True
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        nvml.nvmlDeviceGetCurrentClocksEventReasons(gpu)
    assert nvml.nvmlDeviceGetCurrentClocksThrottleReasons(gpu) >= 0
    events = nvml.nvmlEventSetCreate()
    nvml.nvmlDeviceRegisterEvents(gpu, pynvml.nvmlEventTypeXidCriticalError, events)
    node.lose_gpu(1)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        nvml.nvmlEventSetWait_v2(events, 5)
    for call in (lambda: nvml.nvmlDeviceGetHandleByIndex(1), lambda: nvml.nvmlDeviceGetUUID(gpu)):
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            call()
    assert nvml.nvmlDeviceGetCount() == 2
    with pytest.raises(ValueError, match="not an NVML function"):
        node.inject_error("getPower", 3)


def test_same_seed_and_time_give_the_same_values():
    noisy = scenario(pods=[{"namespace": "a", "name": "n", "device": {"gpu": 1},
                            "workload": {"sm": {"base": 0.5, "noise": 0.1}, "memory": {"base": "4Gi", "noise": "1Gi"}}}])

    def readings(seed: int) -> list:
        sim = SimulatedGpuNode.from_scenario({**noisy, "seed": seed}, SimClock())
        sim.nvml.nvmlInit()
        gpu = sim.nvml.nvmlDeviceGetHandleByIndex(1)
        values = []
        for tick in (5, 300, 2):  # any order: the state is a function of the tick
            sim.clock.set(tick) if tick > sim.clock.now() else None
            state = sim.state(tick)
            values.append((state.gpus[1].whole.busy, state.gpus[1].whole.memory_used))
        values.append(sim.nvml.nvmlDeviceGetUUID(gpu))
        sim.close()
        return values

    assert readings(11) == readings(11)
    assert readings(11) != readings(12)


def test_end_pod_stops_its_processes_from_that_tick():
    from watchdog.testbed import DEMO_SCENARIO, SimClock, SimulatedGpuNode

    clock = SimClock()
    node = SimulatedGpuNode.from_scenario(DEMO_SCENARIO, clock)
    clock.advance(5.0)
    before = {(p.namespace, p.pod) for p in node.processes()}
    assert ("batch", "train-big") in before
    assert node.end_pod("batch", "train-big")
    assert ("batch", "train-big") not in {(p.namespace, p.pod) for p in node.processes()}
    assert ("batch", "train-big") in {(p.namespace, p.pod) for p in node.processes(tick=4)}
    assert not node.end_pod("batch", "no-such-pod")



def test_process_utilisation_with_no_process_at_all_is_pynvmls_success_error() -> None:
    # pynvml 13.615.71 raises NVMLError(ret) when the sizing call answers anything but InsufficientSize, SUCCESS
    # with a count of 0 included: an NVMLError whose value is 0 and that is no NVMLError_* subclass.
    node = SimulatedGpuNode.from_scenario({"name": "idle", "gpus": [{"model": "H100-80GB-HBM3"}]}, SimClock())
    node.nvml.nvmlInit()
    try:
        with pytest.raises(pynvml.NVMLError) as raised:
            node.nvml.nvmlDeviceGetProcessUtilization(node.nvml.nvmlDeviceGetHandleByIndex(0), 0)
    finally:
        node.nvml.nvmlShutdown()
        node.close()
    assert type(raised.value) is pynvml.NVMLError and raised.value.value == pynvml.NVML_SUCCESS == 0
