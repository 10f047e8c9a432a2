"""Simulated GPM (GPU Performance Monitoring) and event-set calls.

GPM is how a sampler sees SM and DRAM activity per MIG instance on Hopper and newer (nvml.h, nvmlGpm*): it takes two
opaque samples and asks the driver for the rates between them. Here a sample records *what* was sampled (GPU,
MIG instance or GPU instance) and *when* (the simulated time); nvmlGpmMetricsGet averages the simulated metric
over that interval, tick by tick, weighted by overlap — the same "average between two counter readings" a real
GPM diff yields. As in the driver, the request's ``version`` must be NVML_GPM_METRICS_GET_VERSION (pynvml leaves
it unset) and the A100 reports no GPM support.

The graphics engine's context-switch counters (GR0_CTXSW_*, NVML 12.9+) are totals over the interval, not
averages: REQUESTS counts the switches, CYCLES_ELAPSED the SM-clock cycles of the interval, CYCLES_ACTIVE the share
of them spent switching (ACTIVE_PCT), CYCLES_PER_REQ the quotient. Only engine 0 is modelled (GR1–GR7 answer
NotSupported per slot); a scenario GPU with ``gpm_ctxsw: false`` stands for a driver older than 12.9, which answers
NotSupported for every CTXSW slot while the other metrics of the same request still answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from watchdog.testbed.nvml.event_sets import GPU_LOST
from watchdog.testbed.nvml.base import NvmlBase, address_of, fake_pointer, nvml_call, nvml_error, pynvml
from watchdog.testbed.tick_state import OCCUPANCY_PER_ACTIVE_SM, GpuState

MIN_GPM_INTERVAL_SECONDS = 0.1  # "samples must be >100 ms apart" (nvml.h, nvmlGpmMetricsGet)
SUPPORTED_EVENTS = (pynvml.nvmlEventTypeSingleBitEccError | pynvml.nvmlEventTypeDoubleBitEccError
                    | pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventMigConfigChange)
_METRIC_INFO = {
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: (b"gr_util", b"graphics engine utilization", b"%"),
    pynvml.NVML_GPM_METRIC_SM_UTIL: (b"sm_util", b"SM utilization", b"%"),
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: (b"sm_occupancy", b"SM occupancy", b"%"),
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: (b"dram_bw_util", b"DRAM bandwidth utilization", b"%"),
    pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: (b"pcie_tx", b"PCIe transmit bandwidth", b"MiB/sec"),
    pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: (b"pcie_rx", b"PCIe receive bandwidth", b"MiB/sec"),
}
_PCIE = {pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC, pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC}
_CTXSW_INFO = {
    pynvml.NVML_GPM_METRIC_GR0_CTXSW_CYCLES_ELAPSED: (b"gr0_ctxsw_cycles_elapsed", b"GR0 cycles elapsed", b"cycles"),
    pynvml.NVML_GPM_METRIC_GR0_CTXSW_CYCLES_ACTIVE: (b"gr0_ctxsw_cycles_active", b"GR0 context switch cycles",
                                                     b"cycles"),
    pynvml.NVML_GPM_METRIC_GR0_CTXSW_REQUESTS: (b"gr0_ctxsw_requests", b"GR0 context switch requests", b"requests"),
    pynvml.NVML_GPM_METRIC_GR0_CTXSW_CYCLES_PER_REQ: (b"gr0_ctxsw_cycles_per_req", b"GR0 cycles per context switch",
                                                      b"cycles/request"),
    pynvml.NVML_GPM_METRIC_GR0_CTXSW_ACTIVE_PCT: (b"gr0_ctxsw_active_pct", b"GR0 context switch active time", b"%"),
}
_INFO = {**_METRIC_INFO, **_CTXSW_INFO}


@dataclass(frozen=True, slots=True)
class _Taken:
    gpu: int
    slot: int | None  # None: the whole GPU
    generation: int
    time: float


def _ctxsw(*, switching: float, requests: float, cycles: float) -> dict[int, float]:
    """The GR0 CTXSW answers over one interval from its time share spent switching, its switches and its cycles.

    ACTIVE_PCT is the time share itself, and CYCLES_ACTIVE is derived from it so the counters agree with each other
    (active / elapsed = pct / 100, active / requests = cycles per request) even when the clock changed meanwhile.
    """
    requests = float(round(requests))  # a counter of whole switches
    active = switching * cycles
    return {
        pynvml.NVML_GPM_METRIC_GR0_CTXSW_CYCLES_ELAPSED: cycles,
        pynvml.NVML_GPM_METRIC_GR0_CTXSW_CYCLES_ACTIVE: active,
        pynvml.NVML_GPM_METRIC_GR0_CTXSW_REQUESTS: requests,
        pynvml.NVML_GPM_METRIC_GR0_CTXSW_CYCLES_PER_REQ: active / requests if requests else 0.0,
        pynvml.NVML_GPM_METRIC_GR0_CTXSW_ACTIVE_PCT: 100.0 * switching,
    }


def _metric(state: GpuState, slot: int | None, metric: int) -> float | None:
    domain = state.whole if slot is None else state.instances.get(slot)
    if domain is None:
        return 0.0
    if metric == pynvml.NVML_GPM_METRIC_SM_UTIL:
        return 100.0 * domain.sm
    if metric == pynvml.NVML_GPM_METRIC_SM_OCCUPANCY:
        return 100.0 * domain.sm * OCCUPANCY_PER_ACTIVE_SM
    if metric == pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL:
        return 100.0 * domain.dram
    if metric == pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL:
        return 100.0 * domain.busy
    # PCIe per GPU instance, as nvidia_gpu_exporter reads it through nvmlGpmMigSampleGet; the whole GPU's otherwise.
    if metric == pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC:
        return (state.pcie_tx_bytes if slot is None else domain.pcie_tx) / 2**20
    if metric == pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC:
        return (state.pcie_rx_bytes if slot is None else domain.pcie_rx) / 2**20
    return None


class GpmEventCalls(NvmlBase):
    # ------------------------------------------------------------------------------------------------ GPM

    def _gpm_device(self, device) -> tuple[int, int | None]:
        gpu, slot = self._resolve(device)
        if not self._node.models[gpu].gpm:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu, slot

    def _sample_address(self, sample) -> int:
        address = address_of(sample)
        if address is None or address not in self._samples:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return address

    @nvml_call
    def nvmlGpmQueryDeviceSupport(self, device):
        gpu, _ = self._resolve(device)
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = 1 if self._node.models[gpu].gpm else 0
        return support

    @nvml_call
    def nvmlGpmSampleAlloc(self):
        address = self._next_sample = self._next_sample + 16
        self._samples[address] = None
        return fake_pointer(pynvml.c_nvmlGpmSample_t, address)

    @nvml_call
    def nvmlGpmSampleFree(self, gpmSample):
        del self._samples[self._sample_address(gpmSample)]

    @nvml_call
    def nvmlGpmSampleGet(self, device, gpmSample):
        gpu, slot = self._gpm_device(device)
        address = self._sample_address(gpmSample)
        self._samples[address] = _Taken(gpu, slot, self._node.layout(gpu).generation, self._node.clock.elapsed())
        return gpmSample

    @nvml_call
    def nvmlGpmMigSampleGet(self, device, gpuInstanceId, gpmSample):
        gpu = self._parent(device, mig_error=pynvml.NVML_ERROR_INVALID_ARGUMENT)  # takes the *parent* handle
        if not self._node.models[gpu].gpm:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        address = self._sample_address(gpmSample)
        layout = self._node.layout(gpu)
        for instance in layout.instances:
            if instance.gpu_instance == gpuInstanceId:
                self._samples[address] = _Taken(gpu, instance.slot, layout.generation, self._node.clock.elapsed())
                return gpmSample
        raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)

    @nvml_call
    def nvmlGpmMetricsGet(self, metricsGet):
        if metricsGet.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise nvml_error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if not 0 < metricsGet.numMetrics <= pynvml.NVML_GPM_METRIC_MAX:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        first = self._samples[self._sample_address(metricsGet.sample1)]
        second = self._samples[self._sample_address(metricsGet.sample2)]
        if first is None or second is None or (first.gpu, first.slot) != (second.gpu, second.slot):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if first.generation != second.generation or second.time - first.time < MIN_GPM_INTERVAL_SECONDS:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if self._node.is_lost(first.gpu):
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        averages = self._interval_averages(first, second, [metricsGet.metrics[i].metricId
                                                           for i in range(metricsGet.numMetrics)])
        for position, value in enumerate(averages):
            slot = metricsGet.metrics[position]
            if value is None:
                slot.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                continue
            slot.nvmlReturn = pynvml.NVML_SUCCESS
            slot.value = value
            slot.metricInfo.shortName, slot.metricInfo.longName, slot.metricInfo.unit = _INFO[slot.metricId]
        return metricsGet

    def _interval_averages(self, first: _Taken, second: _Taken, metrics: list[int]) -> list[float | None]:
        """Per requested metric: its average over the interval (a CTXSW counter: its total), None if unsupported."""
        tick_seconds = self._node.scenario.tick_seconds
        start, end = first.time, second.time
        per_instance_pcie = self._node.pcie_per_instance(first.gpu)
        ctxsw = self._node.scenario.gpus[first.gpu].gpm_ctxsw
        averaged = [metric in _METRIC_INFO and (first.slot is None or per_instance_pcie or metric not in _PCIE)
                    for metric in metrics]
        counted = [ctxsw and metric in _CTXSW_INFO for metric in metrics]
        wants_ctxsw = any(counted)
        totals = [0.0] * len(metrics)
        switching = switches = cycles = 0.0  # ∫ share switching dt, ∫ switches/s dt, ∫ SM clock (Hz) dt
        for tick in range(math.floor(start / tick_seconds + 1e-9), math.floor(end / tick_seconds + 1e-9) + 1):
            overlap = min(end, (tick + 1) * tick_seconds) - max(start, tick * tick_seconds)
            if overlap <= 0:
                continue
            state = self._node.state(tick).gpus[first.gpu]
            for position, metric in enumerate(metrics):
                if averaged[position]:
                    totals[position] += _metric(state, first.slot, metric) * overlap
            if wants_ctxsw:
                domain = state.whole if first.slot is None else state.instances.get(first.slot)
                if domain is not None:
                    switching += domain.switching * overlap
                    switches += domain.switches_per_second * overlap
                cycles += state.sm_clock_mhz * 1e6 * overlap
        span = end - start
        counters = _ctxsw(switching=switching / span, requests=switches, cycles=cycles) if wants_ctxsw else {}
        return [total / span if ok else counters[metric] if count else None
                for metric, total, ok, count in zip(metrics, totals, averaged, counted)]

    # --------------------------------------------------------------------------------------------- events

    def _event_set(self, eventSet) -> int:
        address = address_of(eventSet)
        if address is None or not self._node.events.has_set(address):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return address

    @nvml_call
    def nvmlEventSetCreate(self):
        address = self._next_event_set = self._next_event_set + 16
        self._node.events.create_set(address)
        return fake_pointer(pynvml.c_nvmlEventSet_t, address)

    @nvml_call
    def nvmlDeviceGetSupportedEventTypes(self, handle):
        self._parent(handle)  # per-instance events through MIG handles are unsupported (nvml.h, nvmlEventSetWait_v2)
        return SUPPORTED_EVENTS

    @nvml_call
    def nvmlDeviceRegisterEvents(self, handle, eventTypes, eventSet):
        gpu = self._parent(handle)
        address = self._event_set(eventSet)
        if eventTypes & ~SUPPORTED_EVENTS:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)  # "some of requested event types" (nvml.h)
        self._node.events.register(address, gpu=gpu, mask=eventTypes)

    @nvml_call
    def nvmlEventSetWait_v2(self, eventSet, timeoutms):
        address = self._event_set(eventSet)
        try:
            event = self._node.events.wait(address, timeoutms / 1000.0)
        except KeyError:  # freed by another thread while waiting
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT) from None
        if event is None:
            raise nvml_error(pynvml.NVML_ERROR_TIMEOUT)
        if isinstance(event, str) and event == GPU_LOST:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        data = pynvml.c_nvmlEventData_t()
        data.device = self._gpu_handles[event.gpu]
        data.eventType = event.event_type
        data.eventData = event.data
        data.gpuInstanceId = event.gpu_instance
        data.computeInstanceId = event.compute_instance
        return data

    @nvml_call
    def nvmlEventSetWait(self, eventSet, timeoutms):
        return self.nvmlEventSetWait_v2(eventSet, timeoutms)

    @nvml_call
    def nvmlEventSetFree(self, eventSet):
        self._node.events.free_set(self._event_set(eventSet))
