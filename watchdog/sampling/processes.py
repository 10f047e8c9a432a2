"""Which processes run on a device, how much memory each holds and, without MIG, how much SM time each gets.

Process lists are what attribution joins to pods, and on a time-sliced GPU the per-process SM share is the only
way to tell a noisy neighbour from a victim. Two pynvml quirks shape this module: the versioned process call
raises NVMLLibraryMismatchError (not an NVMLError) when the driver lacks ``_v3``, and
nvmlDeviceGetProcessUtilization answers NotFound when no sample is newer than the timestamp it was given, or
NVMLError with code 0 (SUCCESS) when there are none at all: pynvml 13.615.71 raises ``NVMLError(ret)`` for any
first-call answer other than InsufficientSize, SUCCESS with a count of 0 included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

from watchdog.model import NOT_ATTRIBUTABLE, ProcessSample
from watchdog.sampling.call_guard import CallGuard, error_name, nvml_code

V3_CALL = "nvmlDeviceGetComputeRunningProcesses"
V2_CALL = "nvmlDeviceGetComputeRunningProcesses_v2"


@dataclass(slots=True)
class _UtilisationHistory:
    """Per GPU: the newest sample timestamp seen (µs, NVML's clock) and the last known share per pid."""

    last_seen_us: int | None = None  # None: nothing seen yet, ask for the whole buffer (timestamp 0)
    by_pid: dict[int, tuple[float, float, float]] = field(default_factory=dict)  # pid → (sm, mem, agent time)


def _instance_id(value: Any) -> int | None:
    if value is None:
        return None
    value = int(value)
    return None if value == NOT_ATTRIBUTABLE else value


class ProcessReader:
    """Reads running compute processes, falling back to ``_v2`` once the library says ``_v3`` is missing."""

    def __init__(self, nvml: ModuleType, guard: CallGuard, *, clock: Callable[[], float], hold_seconds: float) -> None:
        self._nvml = nvml
        self._guard = guard
        self._clock = clock
        self._hold_seconds = hold_seconds
        self._use_v2 = False
        self._mismatch = getattr(nvml, "NVMLLibraryMismatchError", ())
        # Both mean "no sample newer than the timestamp": not an error, not counted.
        self._nothing_new = (nvml_code(nvml, "NVML_ERROR_NOT_FOUND"), nvml_code(nvml, "NVML_SUCCESS"))
        self._history: dict[str, _UtilisationHistory] = {}

    @property
    def uses_v2(self) -> bool:
        return self._use_v2

    def running(self, device_key: str, handle: Any, *, mig: bool) -> list[Any] | None:
        """The raw process records of a device, or None when they could not be read this tick."""
        if not self._use_v2:
            try:
                return self._guard.call(device_key, V3_CALL, handle, label="processes", mig=mig, strict=True)
            except self._mismatch as exc:
                # pynvml's throwOnVersionMismatch: the driver lacks nvmlDeviceGetComputeRunningProcesses_v3.
                # That holds for the whole library, so every device uses _v2 from now on.
                self._guard.counts.add(error_name(self._nvml, exc))
                self._use_v2 = True
        return self._guard.call(device_key, V2_CALL, handle, label="processes_v2", mig=mig)

    def samples(
        self, records: list[Any] | None, utilisation: dict[int, tuple[float, float, float]] | None = None
    ) -> tuple[ProcessSample, ...]:
        if not records:
            return ()
        shares = utilisation or {}
        result = []
        for record in records:
            pid = int(record.pid)
            sm, mem, _ = shares.get(pid, (None, None, None))
            used = getattr(record, "usedGpuMemory", None)
            result.append(
                ProcessSample(
                    pid=pid,
                    used_memory_bytes=None if used is None else int(used),
                    gpu_instance=_instance_id(getattr(record, "gpuInstanceId", None)),
                    compute_instance=_instance_id(getattr(record, "computeInstanceId", None)),
                    sm_util=sm,
                    memory_util=mem,
                )
            )
        return tuple(result)

    def utilisation(self, device_key: str, handle: Any) -> dict[int, tuple[float, float, float]]:
        """Per-pid (SM share, memory share, agent time seen) on a GPU not in MIG mode (0–1 ratios).

        The call returns the samples newer than ``lastSeenTimeStamp``; NotFound (or pynvml's NVMLError(SUCCESS))
        means none arrived since the previous call, so the last known shares are kept for ``hold_seconds`` before
        they are dropped.
        """
        history = self._history.setdefault(device_key, _UtilisationHistory())
        now = self._clock()
        rows = self._guard.call(
            device_key,
            "nvmlDeviceGetProcessUtilization",
            handle,
            history.last_seen_us or 0,
            quiet_codes=self._nothing_new,
        )
        newest: dict[int, tuple[int, float, float]] = {}
        seen_before = history.last_seen_us
        for row in rows or ():
            pid, stamp = int(row.pid), int(row.timeStamp)
            if seen_before is not None and stamp <= seen_before:
                continue  # a sample already taken into account: it does not renew the hold
            if pid not in newest or stamp >= newest[pid][0]:
                newest[pid] = (stamp, int(row.smUtil) / 100.0, int(row.memUtil) / 100.0)
            history.last_seen_us = stamp if history.last_seen_us is None else max(history.last_seen_us, stamp)
        for pid, (_, sm, mem) in newest.items():
            history.by_pid[pid] = (min(sm, 1.0), min(mem, 1.0), now)
        expired = [pid for pid, (_, _, seen) in history.by_pid.items() if now - seen > self._hold_seconds]
        for pid in expired:
            del history.by_pid[pid]
        return history.by_pid

    def forget(self, device_key: str) -> None:
        self._history.pop(device_key, None)
