"""GPU Performance Monitoring (GPM) rates: the only per-MIG view of DRAM bandwidth and SM activity.

nvmlDeviceGetUtilizationRates is NotSupported on MIG-enabled GPUs, so on Hopper and newer the per-instance
numbers come from GPM: two opaque samples taken more than 100 ms apart, diffed by nvmlGpmMetricsGet. Following
DCGM's DcgmGpmManager, DRAM bandwidth is per GPU instance (nvmlGpmMigSampleGet on the *parent* handle with the GI
id) and SM utilisation/occupancy per compute instance (nvmlGpmSampleGet on the MIG handle).

Each stream (a GI, a CI, or a whole GPU) keeps its previous sample and a spare one, swapped after every diff, so
a steady tick allocates nothing; samples of a stream that is reset (instance reconfigured) or closed are freed.
The metrics request is reused too, and its fields are touched through their ctypes descriptors (sampling.structs):
~100 diffs per tick on a dense MIG node made pynvml's per-access hooks the largest agent-side cost of a tick.

Some metrics are newer than the drivers in the field: the graphics engine's context-switch counters (GR0_CTXSW_*)
exist from NVML 12.9, and an older driver answers their slots with an error while the rest of the request
succeeds. Such *optional* metrics ride in the request a stream already makes; after the first error answer for one
on a device they are left out of that device's requests, so an old driver costs neither a slot nor an error count
per tick.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Hashable

from watchdog.sampling.call_guard import CallGuard, error_name
from watchdog.sampling.structs import field_getter, field_setter

log = logging.getLogger(__name__)

# nvml.h: NVML_GPM_METRIC_* ids; every *_UTIL / occupancy metric is a percentage 0–100.
SM_UTIL = 2
SM_OCCUPANCY = 3
DRAM_BW_UTIL = 10
# nvml.h: NVML_GPM_METRIC_PCIE_TX_PER_SEC / _RX_PER_SEC, in MiB/s (not a percentage): read as bytes/s, unclamped.
PCIE_TX_PER_SEC = 20
PCIE_RX_PER_SEC = 21
# nvml.h (NVML 12.9+): graphics engine 0's context switching between the two samples. ACTIVE_PCT is the percentage
# of the time switching (0–100); REQUESTS is a count over the interval, read as switches per second.
GR0_CTXSW_REQUESTS = 172
GR0_CTXSW_ACTIVE_PCT = 174
CTXSW = (GR0_CTXSW_ACTIVE_PCT, GR0_CTXSW_REQUESTS)
# How a slot's value becomes a reading: a percentage → a 0–1 ratio (clamped); a rate → × its factor; a count over
# the interval → ÷ the seconds between the two samples.
_PERCENT, _RATE, _COUNT = 0, 1, 2
_CONVERSIONS = {PCIE_TX_PER_SEC: (_RATE, float(1 << 20)), PCIE_RX_PER_SEC: (_RATE, float(1 << 20)),
                GR0_CTXSW_REQUESTS: (_COUNT, 1.0)}
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
    kinds: tuple[int, ...] = ()  # per slot: _PERCENT, _RATE or _COUNT (see _CONVERSIONS)
    factors: tuple[float, ...] = ()

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
            kinds=tuple(_CONVERSIONS.get(metric, (_PERCENT,))[0] for metric in metrics) or (_PERCENT,) * len(slots),
            factors=tuple(_CONVERSIONS.get(metric, (_PERCENT, 1.0))[1] for metric in metrics) or (1.0,) * len(slots),
        )


class GpmTracker:
    """Keeps GPM samples per stream and turns consecutive pairs into 0–1 ratios (PCIe: bytes/s; counts: per s)."""

    def __init__(self, nvml: ModuleType, guard: CallGuard, *, min_interval: float) -> None:
        self._nvml = nvml
        self._guard = guard
        self._min_interval = min_interval
        self._streams: dict[Hashable, _Stream] = {}
        self._requests: dict[tuple[int, ...], _Request] = {}
        self._version = int(getattr(nvml, "NVML_GPM_METRICS_GET_VERSION", 1))
        self._refused: set[Hashable] = set()  # devices whose driver refused an optional metric

    def read(
        self,
        stream_key: Hashable,
        *,
        device_key: Hashable,
        metrics: tuple[int, ...],
        now: float,
        take: Callable[[Any], Any],
        optional: int = 0,
    ) -> tuple[float | None, ...]:
        """Readings of ``metrics`` over the interval since this stream's previous sample.

        ``take(sample)`` fills a sample (nvmlGpmSampleGet or nvmlGpmMigSampleGet through the guard) and returns
        None on failure. Closer than ``min_interval`` to the previous sample, the previous readings are returned
        and nothing is sampled: NVML needs the two samples more than 100 ms apart. The last ``optional`` metrics
        are asked until the device answers one of them with an error; from then on they are None, unasked.
        """
        asked = metrics[:-optional] if optional and device_key in self._refused else metrics
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
        values = self._diff(device_key, first=stream.previous, second=current, metrics=asked,
                            seconds=now - stream.taken_at, required=len(metrics) - optional)
        if len(values) < len(metrics):
            values += (None,) * (len(metrics) - len(values))
        stream.previous, stream.spare, stream.taken_at = current, stream.previous, now
        stream.values = values
        return values

    def _diff(
        self, device_key: Hashable, *, first: Any, second: Any, metrics: tuple[int, ...], seconds: float,
        required: int,
    ) -> tuple[float | None, ...]:
        """One nvmlGpmMetricsGet; slots from ``required`` on are optional (an error there refuses them)."""
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
        refused = False
        for slot, kind, factor in zip(request.slots, request.kinds, request.factors):
            code = get_return(slot)
            if code == NVML_SUCCESS:
                value = get_value(slot)
                if kind == _PERCENT:
                    values.append(min(max(value / 100.0, 0.0), 1.0))
                elif kind == _RATE:
                    values.append(max(value, 0.0) * factor)
                else:
                    values.append(max(value, 0.0) / seconds if seconds > 0 else None)
            elif len(values) >= required:  # an optional slot
                self._refuse(device_key, metrics[len(values)], code)
                refused = True
                values.append(None)
            else:
                self._guard.counts.add("gpm_metric_unavailable")
                values.append(None)
        if refused:
            values[required:] = [None] * (len(values) - required)  # all optional metrics or none, per device
        return tuple(values)

    def _refuse(self, device_key: Hashable, metric: int, code: int) -> None:
        if device_key in self._refused:
            return
        try:
            answer = error_name(self._nvml, self._nvml.NVMLError(code))
        except Exception:  # an unknown code, or a module without NVMLError
            answer = f"code_{code}"
        self._refused.add(device_key)
        log.info("GPU %s answers GPM metric %d with %s: its optional GPM metrics are no longer asked for",
                 device_key, metric, answer)

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
