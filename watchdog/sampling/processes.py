"""Which processes run on a device, how much memory each holds and, without MIG, how much SM time each gets.

Process lists are what attribution joins to pods, and on a time-sliced GPU the per-process SM share is the only
way to tell a noisy neighbour from a victim. NVML keeps three lists per device (MIG handles included): compute
processes, clients of the Multi-Process Service ("processes with a Multi-Process Service (MPS) compute context",
NVML API reference, nvmlDeviceGetMPSComputeRunningProcesses_v3) and graphics processes. Under MPS a client's
context lives inside the MPS server, so a reader of the compute list alone misses the clients; nvitop and nvtop ask
all three and merge by PID, and so does this module. A list a device does not support answers NotSupported or
FunctionNotFound once: the call guard remembers that per (device, list) until the device's MIG mode changes.
Two pynvml quirks shape this module: each unversioned process call raises NVMLLibraryMismatchError (not an
NVMLError) when the driver lacks its ``_v3``, and
nvmlDeviceGetProcessUtilization answers NotFound when no sample is newer than the timestamp it was given, or
NVMLError with code 0 (SUCCESS) when there are none at all: pynvml 13.615.71 raises ``NVMLError(ret)`` for any
first-call answer other than InsufficientSize, SUCCESS with a count of 0 included.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

from watchdog.model import NOT_ATTRIBUTABLE, PROCESS_MODES, ProcessSample
from watchdog.sampling.call_guard import CallGuard, error_name, nvml_code


@dataclass(frozen=True, slots=True)
class ProcessList:
    """One of NVML's process lists: the unversioned pynvml call (``_v3`` underneath) and its ``_v2`` fallback."""

    mode: str  # the ProcessSample.mode it contributes
    call: str
    fallback: str
    label: str  # the call guard's key, so NotSupported on one list never hides another


PROCESS_LISTS = (
    ProcessList("compute", "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2",
                "processes"),
    ProcessList("mps", "nvmlDeviceGetMPSComputeRunningProcesses", "nvmlDeviceGetMPSComputeRunningProcesses_v2",
                "processes_mps"),
    ProcessList("graphics", "nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses_v2",
                "processes_graphics"),
)
# The MPS and graphics lists are empty on most devices of a GPU node (no MPS daemon, no display), and each call costs
# the agent a few microseconds on every device every tick (~0.5 ms at 56 MIG instances). One that answered empty is
# asked again on every QUIET_LIST_EVERY-th tick only (every device together: one sweep), so an MPS client that
# appears is seen within that many ticks; one that lists anybody is asked every tick. The compute list is always asked.
QUIET_LIST_EVERY = 10
_COMPUTE, _SECONDARY = PROCESS_LISTS[0], PROCESS_LISTS[1:]
V3_CALL = PROCESS_LISTS[0].call
V2_CALL = PROCESS_LISTS[0].fallback


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
    """Reads every process list of a device, each falling back to its ``_v2`` once the library lacks its ``_v3``."""

    def __init__(self, nvml: ModuleType, guard: CallGuard, *, clock: Callable[[], float], hold_seconds: float) -> None:
        self._nvml = nvml
        self._guard = guard
        self._clock = clock
        self._hold_seconds = hold_seconds
        self._v2_modes: set[str] = set()
        self._mismatch = getattr(nvml, "NVMLLibraryMismatchError", ())
        # Both mean "no sample newer than the timestamp": not an error, not counted.
        self._nothing_new = (nvml_code(nvml, "NVML_ERROR_NOT_FOUND"), nvml_code(nvml, "NVML_SUCCESS"))
        self._history: dict[str, _UtilisationHistory] = {}
        self._listing: dict[str, set[str]] = {}  # device → the secondary lists that named somebody when last asked
        self._ticks = 0
        self._sweep = True  # this tick asks every secondary list of every device

    def next_tick(self) -> None:
        """A new tick begins: every QUIET_LIST_EVERY-th one asks the secondary lists of every device."""
        self._sweep = self._ticks % QUIET_LIST_EVERY == 0
        self._ticks += 1

    @property
    def uses_v2(self) -> bool:
        """Whether the compute list fell back to ``_v2``."""
        return "compute" in self._v2_modes

    def running(self, device_key: str, handle: Any, *, mig: bool) -> dict[str, list[Any]] | list[Any] | None:
        """The compute list's raw records (None when it could not be read) — or, when a secondary list named
        somebody this tick, mode → records of every list that did. Most devices, most ticks: the compute list
        alone, in the shape the compute call gives it (the common case costs what it did before MPS was read)."""
        records = self._read(_COMPUTE, device_key, handle, mig=mig)
        listing = self._listing.get(device_key)
        if not (self._sweep or listing):
            return records
        found: dict[str, list[Any]] = {}
        for secondary in _SECONDARY:
            if mig and secondary.mode == "graphics":
                continue  # MIG supports no graphics contexts (NVIDIA MIG User Guide, "Application Considerations")
            if not self._sweep and secondary.mode not in listing:  # type: ignore[operator]
                continue
            others = self._read(secondary, device_key, handle, mig=mig)
            if others:
                found[secondary.mode] = others
                self._listing.setdefault(device_key, set()).add(secondary.mode)
            elif others is not None and listing:
                listing.discard(secondary.mode)
        if not found:
            return records
        if records:
            found[_COMPUTE.mode] = records
        return found

    def _read(self, listing: ProcessList, device_key: str, handle: Any, *, mig: bool) -> list[Any] | None:
        if listing.mode not in self._v2_modes:
            try:
                return self._guard.call(device_key, listing.call, handle, label=listing.label, mig=mig, strict=True)
            except self._mismatch as exc:
                # pynvml's throwOnVersionMismatch: the driver lacks this list's _v3. That holds for the whole
                # library, so every device uses _v2 for this list from now on.
                self._guard.counts.add(error_name(self._nvml, exc))
                self._v2_modes.add(listing.mode)
        return self._guard.call(device_key, listing.fallback, handle, label=f"{listing.label}_v2", mig=mig)

    def samples(
        self,
        lists: dict[str, list[Any]] | list[Any] | None,
        utilisation: dict[int, tuple[float, float, float]] | None = None,
    ) -> tuple[ProcessSample, ...]:
        """One sample per PID across the lists (a bare list is the compute list's).

        A PID in several lists keeps the largest used memory any of them reported (None only when none did), its
        first known GPU/compute instance, and every mode it was listed in.
        """
        if not lists:
            return ()
        shares = utilisation or {}
        if not isinstance(lists, dict):  # the compute list alone (the common case): no merge to make
            return self._one_list(lists, "compute", shares)
        if len(lists) == 1:
            (mode, records), = lists.items()
            return self._one_list(records, mode, shares)
        merged: dict[int, ProcessSample] = {}
        for mode in PROCESS_MODES:
            for proc in self._one_list(lists.get(mode) or (), mode, shares):
                held = merged.get(proc.pid)
                merged[proc.pid] = proc if held is None else _merged(held, proc)
        return tuple(merged.values())

    @staticmethod
    def _one_list(records: list[Any], mode: str, shares: dict[int, tuple[float, float, float]]
                  ) -> tuple[ProcessSample, ...]:
        result = []
        for record in records:
            pid = int(record.pid)
            sm, mem, _ = shares.get(pid, (None, None, None))
            used = getattr(record, "usedGpuMemory", None)
            result.append(ProcessSample(
                pid=pid,
                used_memory_bytes=None if used is None else int(used),
                gpu_instance=_instance_id(getattr(record, "gpuInstanceId", None)),
                compute_instance=_instance_id(getattr(record, "computeInstanceId", None)),
                sm_util=sm,
                memory_util=mem,
                mode=mode,
            ))
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


def _merged(held: ProcessSample, other: ProcessSample) -> ProcessSample:
    """One PID listed twice: the largest used memory either reported, the first known GPU/compute instance, and
    every list it was in."""
    used = held.used_memory_bytes
    if other.used_memory_bytes is not None and (used is None or other.used_memory_bytes > used):
        used = other.used_memory_bytes
    gpu_instance, compute_instance = held.gpu_instance, held.compute_instance
    if gpu_instance is None:
        gpu_instance, compute_instance = other.gpu_instance, other.compute_instance
    mode = held.mode if other.mode in held.mode.split("+") else f"{held.mode}+{other.mode}"
    return dataclasses.replace(held, used_memory_bytes=used, gpu_instance=gpu_instance,
                               compute_instance=compute_instance, mode=mode)
