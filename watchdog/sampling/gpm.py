"""GPU Performance Monitoring (GPM) rates: the only per-MIG view of DRAM bandwidth and SM activity.

nvmlDeviceGetUtilizationRates is NotSupported on MIG-enabled GPUs, so on Hopper and newer the per-instance
numbers come from GPM: two opaque samples taken more than 100 ms apart, diffed by nvmlGpmMetricsGet. Following
DCGM's DcgmGpmManager, DRAM bandwidth is per GPU instance (nvmlGpmMigSampleGet on the *parent* handle with the GI
id) and SM utilisation/occupancy per compute instance (nvmlGpmSampleGet on the MIG handle).

Each stream (a GI, a CI, or a whole GPU) keeps its previous sample and a spare one, swapped after every diff, so
a steady tick allocates nothing; samples of a stream that is reset (instance reconfigured) or closed are freed.
The metrics request is reused too, and its fields are touched through their ctypes descriptors (sampling.structs):
~100 diffs per tick on a dense MIG node made pynvml's per-access hooks the largest agent-side cost of a tick.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Hashable

from watchdog.sampling.call_guard import CallGuard
from watchdog.sampling.structs import field_getter, field_setter

# nvml.h: NVML_GPM_METRIC_* ids; every *_UTIL / occupancy metric is a percentage 0–100.
SM_UTIL = 2
SM_OCCUPANCY = 3
DRAM_BW_UTIL = 10
# nvml.h: NVML_GPM_METRIC_PCIE_TX_PER_SEC / _RX_PER_SEC, in MiB/s (not a percentage): read as bytes/s, unclamped.
PCIE_TX_PER_SEC = 20
PCIE_RX_PER_SEC = 21
_BYTES_PER_SECOND = {PCIE_TX_PER_SEC: float(1 << 20), PCIE_RX_PER_SEC: float(1 << 20)}
NVML_SUCCESS = 0
_NOT_READ = 0xFFFFFFFF


@dataclass(slots=True)
class _Stream:
    previous: Any = None  # the sample the next diff starts from
    spare: Any = None  # an allocated sample the next reading is taken into
    taken_at: float = float("-inf")
    values: tuple[float | None, ...] = ()


@dataclass(frozen=True, slots=True)
class _Request:
    """A reusable c_nvmlGpmMetricsGet_t, views of its metric slots, and hook-free accessors to their fields."""

    struct: Any
    slots: list[Any]
    set_sample1: Callable[[Any, Any], None]
    set_sample2: Callable[[Any, Any], None]
    get_return: Callable[[Any], Any]
    set_return: Callable[[Any, Any], None]
    get_value: Callable[[Any], Any]
    rates: tuple[float | None, ...] = ()  # per slot: bytes per MiB for a rate metric, None for a percentage

    @classmethod
    def around(cls, struct: Any, slots: list[Any], *, metrics: tuple[int, ...] = ()) -> _Request:
        # Field access through the ctypes descriptors skips pynvml's per-access hooks; see sampling.structs.
        slot_type = type(slots[0])
        return cls(
            struct=struct,
            slots=slots,
            set_sample1=field_setter(type(struct), "sample1"),
            set_sample2=field_setter(type(struct), "sample2"),
            get_return=field_getter(slot_type, "nvmlReturn"),
            set_return=field_setter(slot_type, "nvmlReturn"),
            get_value=field_getter(slot_type, "value"),
            rates=tuple(_BYTES_PER_SECOND.get(metric) for metric in metrics) or (None,) * len(slots),
        )


class GpmTracker:
    """Keeps GPM samples per stream and turns consecutive pairs into 0–1 ratios (PCIe: bytes/s)."""

    def __init__(self, nvml: ModuleType, guard: CallGuard, *, min_interval: float) -> None:
        self._nvml = nvml
        self._guard = guard
        self._min_interval = min_interval
        self._streams: dict[Hashable, _Stream] = {}
        self._requests: dict[tuple[int, ...], _Request] = {}
        self._version = int(getattr(nvml, "NVML_GPM_METRICS_GET_VERSION", 1))

    def read(
        self,
        stream_key: Hashable,
        *,
        device_key: Hashable,
        metrics: tuple[int, ...],
        now: float,
        take: Callable[[Any], Any],
    ) -> tuple[float | None, ...]:
        """Ratios (bytes/s for the PCIe rates) of ``metrics`` over the interval since this stream's previous sample.

        ``take(sample)`` fills a sample (nvmlGpmSampleGet or nvmlGpmMigSampleGet through the guard) and returns
        None on failure. Closer than ``min_interval`` to the previous sample, the previous ratios are returned
        and nothing is sampled: NVML needs the two samples more than 100 ms apart.
        """
        nothing = (None,) * len(metrics)
        stream = self._streams.get(stream_key)
        if stream is None:
            stream = self._streams[stream_key] = _Stream(values=nothing)
        if stream.previous is not None and now - stream.taken_at < self._min_interval:
            return stream.values
        if stream.spare is None:
            stream.spare = self._guard.call(device_key, "nvmlGpmSampleAlloc", label="gpm_alloc")
            if stream.spare is None:
                return nothing
        if take(stream.spare) is None:
            return nothing  # counted by the guard; the previous sample stays the diff's start
        current = stream.spare
        if stream.previous is None:
            stream.previous, stream.spare, stream.taken_at = current, None, now
            return nothing
        values = self._diff(device_key, first=stream.previous, second=current, metrics=metrics)
        stream.previous, stream.spare, stream.taken_at = current, stream.previous, now
        stream.values = values
        return values

    def _diff(
        self, device_key: Hashable, *, first: Any, second: Any, metrics: tuple[int, ...]
    ) -> tuple[float | None, ...]:
        request = self._request_for(metrics)
        request.set_sample1(request.struct, first)
        request.set_sample2(request.struct, second)
        set_return = request.set_return
        for slot in request.slots:
            set_return(slot, _NOT_READ)  # so a slot the library leaves untouched never reads as a stale success
        if self._guard.call(device_key, "nvmlGpmMetricsGet", request.struct, label="gpm_metrics") is None:
            return (None,) * len(metrics)
        get_return, get_value = request.get_return, request.get_value
        values: list[float | None] = []
        for slot, rate in zip(request.slots, request.rates):
            if get_return(slot) == NVML_SUCCESS:
                if rate is None:
                    values.append(min(max(get_value(slot) / 100.0, 0.0), 1.0))
                else:
                    values.append(max(get_value(slot), 0.0) * rate)
            else:
                self._guard.counts.add("gpm_metric_unavailable")
                values.append(None)
        return tuple(values)

    def _request_for(self, metrics: tuple[int, ...]) -> _Request:
        """One c_nvmlGpmMetricsGet_t per metric set, filled once and reused (the sampler runs one tick at a time).

        pynvml's nvmlGpmMetricsGet passes the struct as-is, so the caller must set ``version`` (nvml.h,
        nvmlGpmMetricsGet: NVML_GPM_METRICS_GET_VERSION).
        """
        cached = self._requests.get(metrics)
        if cached is None:
            struct = self._nvml.c_nvmlGpmMetricsGet_t()
            struct.version = self._version
            struct.numMetrics = len(metrics)
            slots = [struct.metrics[position] for position in range(len(metrics))]  # views into the struct
            for slot, metric in zip(slots, metrics):
                slot.metricId = metric
            cached = self._requests[metrics] = _Request.around(struct, slots, metrics=metrics)
        return cached

    def forget(self, stream_key: Hashable) -> None:
        """Drop a stream (its instance changed or is gone) and free its samples."""
        stream = self._streams.pop(stream_key, None)
        if stream is not None:
            self._free(stream)

    def forget_where(self, predicate: Callable[[Hashable], bool]) -> None:
        for stream_key in [key for key in self._streams if predicate(key)]:
            self.forget(stream_key)

    def keys(self) -> list[Hashable]:
        return list(self._streams)

    def close(self) -> None:
        for stream in self._streams.values():
            self._free(stream)
        self._streams.clear()

    def _free(self, stream: _Stream) -> None:
        for sample in (stream.previous, stream.spare):
            if sample is not None:
                try:
                    self._nvml.nvmlGpmSampleFree(sample)
                except Exception:  # freeing after a GPU loss can fail; nothing more to do with it
                    self._guard.counts.add("gpm_free")
        stream.previous = stream.spare = None
