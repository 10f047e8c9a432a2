"""The plausibility gate's physical checks: the range of every reading one GPU, MIG device, process or event has.

Split from :mod:`watchdog.model.plausibility` (which keeps the state across ticks: identity, continuity,
quarantine) so each bound sits next to its reason. A bound is as loose as the physics allows and no looser: a
bound that is too tight would blind detection to a real device, one that is too loose lets through a reading no
GPU can give. docs/detection.md ("Plausibility gate") gives the source of each. Pure: no I/O.

A comparison written ``lo <= value <= hi`` is False for NaN, so non-finite readings fail every check, and no bound
is ever turned into a float from an arbitrary integer (``float(10**400)`` raises); relational bounds (used ≤
total, clock ≤ max, power ≤ limit) use only values that passed their own range first.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from watchdog.model.samples import (GpuSample, MigSample, ProcessSample, Rejection, VgpuRunlist, VgpuSample,
                                    XidEvent)

MIG_CONFIG_CHANGE = 0x100  # nvml.h nvmlEventMigConfigChange
MAX_GPU_INDEX = 1023  # NVML indices are 0 … count − 1; no node holds a thousand GPUs
MAX_GPU_INSTANCE_ID = 14  # 15 placements in the tree over 8 memory slices (1 + 2 + 4 + 8): ids 0 … 14
MAX_COMPUTE_INSTANCE_ID = 7  # a GPU instance has at most 8 compute slices, one compute instance each at most
MAX_XID = (1 << 16) - 1  # NVIDIA's Xid catalogue stops in the low hundreds; eventData is 64 bits wide
MAX_PID = 1 << 22  # PID_MAX_LIMIT on 64-bit Linux (include/linux/threads.h)
MAX_MEMORY_BYTES = 1 << 42  # 4 TiB; the largest GPU memory shipped (288 GB HBM3e) is 15 times smaller
MEMORY_SLACK_BYTES = 1 << 20  # 1 MiB: used + reserved may exceed total by page rounding, never by more
MAX_POWER_WATTS = 5000.0  # a whole GB200 superchip board is 2,700 W
POWER_MARGIN = 1.5  # draw may overshoot the enforced limit briefly (nvmlDeviceGetPowerUsage is a 1 s average)
MAX_CLOCK_MHZ = 10_000.0
CLOCK_MARGIN = 1.05  # the current SM clock never exceeds nvmlDeviceGetMaxClockInfo; 5 % for reporting skew
TEMPERATURE_CELSIUS = (-40.0, 150.0)  # NVML reports unsigned °C; GPUs shut down near 100 °C
MAX_PCIE_BYTES_PER_SECOND = 256e9  # PCIe 7.0 x16, one direction: the bound when the link rate is unknown
PCIE_MARGIN = 2.0  # a 20 ms throughput window may read above the link's usable rate, not twice above it
# A context switch takes microseconds (a save and restore of the engine's state), so a million per second would
# leave no time for work: far above any real scheduler's rate (time slices are milliseconds), yet not a loose cap.
MAX_CTXSW_PER_SECOND = 1e6
_MAX_TEXT = 80
_MAX_MASK = (1 << 64) - 1
_MAX_TIMESTAMP = 1e13  # epoch seconds, ~year 318,000: finite and not absurd

# (field, check, low, high): static ranges, inclusive. Memory fields are checked as one struct (see _memory).
_RATIO = (0.0, 1.0)
_GPU_RANGES = (
    ("gpu_util", "ratio", *_RATIO), ("memory_util", "ratio", *_RATIO), ("dram_bw_util", "ratio", *_RATIO),
    ("sm_util", "ratio", *_RATIO), ("power_watts", "power", 0.0, MAX_POWER_WATTS),
    ("power_limit_watts", "power", 1.0, MAX_POWER_WATTS), ("temperature_celsius", "temperature", *TEMPERATURE_CELSIUS),
    ("sm_clock_mhz", "clock", 1.0, MAX_CLOCK_MHZ), ("sm_clock_max_mhz", "clock", 1.0, MAX_CLOCK_MHZ),
    ("clock_event_reasons", "clock", 0, _MAX_MASK),
    ("pcie_link_bytes_per_second", "pcie", 0.0, MAX_PCIE_BYTES_PER_SECOND),
    ("ctxsw_active", "ratio", *_RATIO), ("ctxsw_per_second", "context_switch", 0.0, MAX_CTXSW_PER_SECOND),
)
_MIG_RANGES = (("dram_bw_util", "ratio", *_RATIO), ("sm_util", "ratio", *_RATIO), ("sm_occupancy", "ratio", *_RATIO),
               ("ctxsw_active", "ratio", *_RATIO), ("ctxsw_per_second", "context_switch", 0.0, MAX_CTXSW_PER_SECOND))
_PROCESS_RANGES = (("sm_util", "ratio", *_RATIO), ("memory_util", "ratio", *_RATIO))
_VGPU_RANGES = (("sm_util", "ratio", *_RATIO), ("memory_util", "ratio", *_RATIO), ("encoder_util", "ratio", *_RATIO),
                ("decoder_util", "ratio", *_RATIO))
_MEMORY = ("memory_total_bytes", "memory_used_bytes", "memory_reserved_bytes")
_DROP_MEMORY = dict.fromkeys(_MEMORY)


def text(value: Any) -> str:
    """A refused value as bounded text (a 10 MB string or a 4,300-digit integer must not travel on)."""
    try:
        out = repr(value)
    except ValueError:  # int beyond sys.get_int_max_str_digits
        out = f"<integer of {value.bit_length()} bits>"
    return out if len(out) <= _MAX_TEXT else out[: _MAX_TEXT - 1] + "…"


class Found:
    """The rejections of one tick, in the order the checks met them."""

    __slots__ = ("rejections",)

    def __init__(self) -> None:
        self.rejections: list[Rejection] = []

    def add(self, check: str, device: str, field: str, value: Any, reason: str) -> None:
        self.rejections.append(Rejection(check=check, device=device, field=field, value=text(value), reason=reason))


def _ranges(obj: Any, ranges: tuple, device: str, found: Found, changes: dict[str, Any]) -> None:
    for name, check, low, high in ranges:
        value = getattr(obj, name)
        if value is not None and not low <= value <= high:
            found.add(check, device, name, value, f"outside the plausible range {low} … {high}")
            changes[name] = None


def _memory(obj: Any, device: str, found: Found, changes: dict[str, Any], *, ceiling: int | None) -> int | None:
    """Check total/used/reserved (one nvmlDeviceGetMemoryInfo struct, kept or dropped whole); the plausible
    total, or None. ``ceiling`` is the parent GPU's total for a MIG device (an instance is a slice of it)."""
    total, used, reserved = obj.memory_total_bytes, obj.memory_used_bytes, obj.memory_reserved_bytes
    high = MAX_MEMORY_BYTES if ceiling is None else ceiling + MEMORY_SLACK_BYTES
    problem = None
    if total is not None and not 1 <= total <= high:
        problem = ("memory_total_bytes", total, f"the total must be > 0 and at most {high}")
    elif used is not None and not 0 <= used <= MAX_MEMORY_BYTES:
        problem = ("memory_used_bytes", used, "outside the plausible range 0 … total")
    elif reserved is not None and not 0 <= reserved <= MAX_MEMORY_BYTES:
        problem = ("memory_reserved_bytes", reserved, "outside the plausible range 0 … total")
    elif total is not None and (used or 0) + (reserved or 0) > total + MEMORY_SLACK_BYTES:
        field = "memory_used_bytes" if used is not None else "memory_reserved_bytes"
        problem = (field, getattr(obj, field), f"used + reserved ({(used or 0) + (reserved or 0)}) exceeds the "
                                               f"total ({total}) by more than {MEMORY_SLACK_BYTES} bytes")
    if problem is None:
        return total
    found.add("memory", device, *problem)
    changes.update(_DROP_MEMORY)
    return None


def _pcie(obj: Any, device: str, found: Found, changes: dict[str, Any], *, link: float | None) -> None:
    high = MAX_PCIE_BYTES_PER_SECOND if not link else PCIE_MARGIN * link
    for name in ("pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second"):
        value = getattr(obj, name)
        if value is not None and not 0.0 <= value <= high:
            found.add("pcie", device, name, value, f"outside 0 … {high:.3g} B/s (link rate × {PCIE_MARGIN})")
            changes[name] = None


def _processes(processes: tuple[ProcessSample, ...], device: str, found: Found, *,
               total: int | None) -> tuple[ProcessSample, ...]:
    high = MAX_MEMORY_BYTES if total is None else total + MEMORY_SLACK_BYTES
    for proc in processes:
        if not _plausible_process(proc, high):
            break
    else:
        return processes
    out, changed = [], False
    for proc in processes:
        if not 0 <= proc.pid <= MAX_PID:
            found.add("identity", device, "pid", proc.pid, f"Linux pids are 0 … {MAX_PID}")
            changed = True
            continue
        changes: dict[str, Any] = {}
        used = proc.used_memory_bytes
        if used is not None and not 0 <= used <= high:
            found.add("memory", device, "used_memory_bytes", used, f"a process cannot hold more than its device's "
                                                                   f"{high} bytes")
            changes["used_memory_bytes"] = None
        _ranges(proc, _PROCESS_RANGES, device, found, changes)
        if changes:
            proc, changed = dataclasses.replace(proc, **changes), True
        out.append(proc)
    return tuple(out) if changed else processes


def _plausible_process(proc: ProcessSample, high: int) -> bool:
    """The common case in straight-line code (the checks below, without their messages): ~5 × faster."""
    used, sm, memory = proc.used_memory_bytes, proc.sm_util, proc.memory_util
    return (0 <= proc.pid <= MAX_PID and (used is None or 0 <= used <= high)
            and (sm is None or 0.0 <= sm <= 1.0) and (memory is None or 0.0 <= memory <= 1.0))


def _plausible_mig(mig: MigSample, ceiling: int, pcie: float) -> bool:
    total, used, reserved = mig.memory_total_bytes, mig.memory_used_bytes, mig.memory_reserved_bytes
    dram, sm, occupancy = mig.dram_bw_util, mig.sm_util, mig.sm_occupancy
    tx, rx = mig.pcie_tx_bytes_per_second, mig.pcie_rx_bytes_per_second
    switching, switches = mig.ctxsw_active, mig.ctxsw_per_second
    if not ((total is None or 1 <= total <= ceiling) and (used is None or 0 <= used <= MAX_MEMORY_BYTES)
            and (reserved is None or 0 <= reserved <= MAX_MEMORY_BYTES)
            and (total is None or (used or 0) + (reserved or 0) <= total + MEMORY_SLACK_BYTES)
            and (dram is None or 0.0 <= dram <= 1.0) and (sm is None or 0.0 <= sm <= 1.0)
            and (occupancy is None or 0.0 <= occupancy <= 1.0)
            and (tx is None or 0.0 <= tx <= pcie) and (rx is None or 0.0 <= rx <= pcie)
            and (switching is None or 0.0 <= switching <= 1.0)
            and (switches is None or 0.0 <= switches <= MAX_CTXSW_PER_SECOND)):
        return False
    high = MAX_MEMORY_BYTES if total is None else total + MEMORY_SLACK_BYTES
    for proc in mig.processes:
        if not _plausible_process(proc, high):
            return False
    return True


def _plausible_gpu(gpu: GpuSample) -> bool:
    """Every GPU-level reading in range, its processes too (the checks of ``check_gpu`` without their messages)."""
    total, used, reserved = gpu.memory_total_bytes, gpu.memory_used_bytes, gpu.memory_reserved_bytes
    if not ((total is None or 1 <= total <= MAX_MEMORY_BYTES) and (used is None or 0 <= used <= MAX_MEMORY_BYTES)
            and (reserved is None or 0 <= reserved <= MAX_MEMORY_BYTES)
            and (total is None or (used or 0) + (reserved or 0) <= total + MEMORY_SLACK_BYTES)):
        return False
    # _GPU_RANGES written out: this runs for every GPU on every tick.
    low_t, high_t = TEMPERATURE_CELSIUS
    gpu_util, memory_util, dram, sm = gpu.gpu_util, gpu.memory_util, gpu.dram_bw_util, gpu.sm_util
    power, limit, temperature = gpu.power_watts, gpu.power_limit_watts, gpu.temperature_celsius
    clock, maximum, reasons, link = gpu.sm_clock_mhz, gpu.sm_clock_max_mhz, gpu.clock_event_reasons, \
        gpu.pcie_link_bytes_per_second
    switching, switches = gpu.ctxsw_active, gpu.ctxsw_per_second
    if not ((gpu_util is None or 0.0 <= gpu_util <= 1.0) and (memory_util is None or 0.0 <= memory_util <= 1.0)
            and (dram is None or 0.0 <= dram <= 1.0) and (sm is None or 0.0 <= sm <= 1.0)
            and (power is None or 0.0 <= power <= MAX_POWER_WATTS)
            and (limit is None or 1.0 <= limit <= MAX_POWER_WATTS)
            and (temperature is None or low_t <= temperature <= high_t)
            and (clock is None or 1.0 <= clock <= MAX_CLOCK_MHZ)
            and (maximum is None or 1.0 <= maximum <= MAX_CLOCK_MHZ)
            and (reasons is None or 0 <= reasons <= _MAX_MASK)
            and (link is None or 0.0 <= link <= MAX_PCIE_BYTES_PER_SECOND)
            and (switching is None or 0.0 <= switching <= 1.0)
            and (switches is None or 0.0 <= switches <= MAX_CTXSW_PER_SECOND)):
        return False
    if clock is not None and maximum is not None and clock > maximum * CLOCK_MARGIN:
        return False
    if power is not None and limit is not None and power > limit * POWER_MARGIN:
        return False
    pcie = MAX_PCIE_BYTES_PER_SECOND if not link else PCIE_MARGIN * link
    tx, rx = gpu.pcie_tx_bytes_per_second, gpu.pcie_rx_bytes_per_second
    if not ((tx is None or 0.0 <= tx <= pcie) and (rx is None or 0.0 <= rx <= pcie)):
        return False
    high = MAX_MEMORY_BYTES if total is None else total + MEMORY_SLACK_BYTES
    return all(_plausible_process(proc, high) for proc in gpu.processes)


def _mig(mig: MigSample, found: Found, *, gpu_total: int | None, link: float | None) -> MigSample:
    changes: dict[str, Any] = {}
    device = mig.uuid
    total = _memory(mig, device, found, changes, ceiling=gpu_total)
    _ranges(mig, _MIG_RANGES, device, found, changes)
    _pcie(mig, device, found, changes, link=link)
    processes = _processes(mig.processes, device, found, total=total)
    if processes is not mig.processes:
        changes["processes"] = processes
    return dataclasses.replace(mig, **changes) if changes else mig


def _vgpus(vgpus: tuple[VgpuSample, ...], found: Found, *, gpu_total: int | None) -> tuple[VgpuSample, ...]:
    """Each vGPU's framebuffer within its type's (and its type's within the GPU's), its ratios in 0 … 1; a refused
    reading is named by the vGPU's UUID and set to None."""
    ceiling = MAX_MEMORY_BYTES if gpu_total is None or not 1 <= gpu_total <= MAX_MEMORY_BYTES \
        else gpu_total + MEMORY_SLACK_BYTES
    out, changed = [], False
    for vgpu in vgpus:
        changes: dict[str, Any] = {}
        total, used = vgpu.fb_total_bytes, vgpu.fb_used_bytes
        if total is not None and not 1 <= total <= ceiling:
            found.add("memory", vgpu.uuid, "fb_total_bytes", total, f"a vGPU's framebuffer is > 0 and at most "
                                                                    f"{ceiling} bytes")
            changes["fb_total_bytes"] = total = None
        high = ceiling if total is None else total + MEMORY_SLACK_BYTES
        if used is not None and not 0 <= used <= high:
            found.add("memory", vgpu.uuid, "fb_used_bytes", used, f"outside the plausible range 0 … {high} "
                                                                  "(its framebuffer)")
            changes["fb_used_bytes"] = None
        _ranges(vgpu, _VGPU_RANGES, vgpu.uuid, found, changes)
        if changes:
            vgpu, changed = dataclasses.replace(vgpu, **changes), True
        out.append(vgpu)
    return tuple(out) if changed else vgpus


# The vGPU scheduler's time slice (nvmlDeviceGetVgpuSchedulerState) is milliseconds long; a second is far past any
# the driver sets. Its log holds at most NVML_SCHEDULER_SW_MAX_LOG_ENTRIES (200) entries, so as many slices.
MAX_VGPU_TIMESLICE_SECONDS = 1.0
MAX_VGPU_LOG_SLICES = 200


def _plausible_runlist(runlist: VgpuRunlist) -> bool:
    return (0.0 <= runlist.run_seconds < float("inf") and 0.0 <= runlist.preemption_seconds < float("inf")
            and 0 <= runlist.slices <= MAX_VGPU_LOG_SLICES)


def _vgpu_scheduler(gpu: GpuSample, found: Found) -> GpuSample:
    """The host's scheduler readings: a time slice no driver sets becomes None, a runlist no log can hold is left
    out; each is counted."""
    changes: dict[str, Any] = {}
    timeslice = gpu.vgpu_timeslice_seconds
    if timeslice is not None and not 0.0 < timeslice <= MAX_VGPU_TIMESLICE_SECONDS:
        found.add("context_switch", gpu.uuid, "vgpu_timeslice_seconds", timeslice,
                  f"a vGPU time slice is > 0 and at most {MAX_VGPU_TIMESLICE_SECONDS:g} s")
        changes["vgpu_timeslice_seconds"] = None
    kept = tuple(runlist for runlist in gpu.vgpu_runlists if _plausible_runlist(runlist))
    if len(kept) != len(gpu.vgpu_runlists):
        for runlist in gpu.vgpu_runlists:
            if not _plausible_runlist(runlist):
                found.add("context_switch", gpu.uuid, f"vgpu_runlists[{runlist.runlist}]", runlist,
                          f"run and preemption seconds are finite and ≥ 0, slices 0 … {MAX_VGPU_LOG_SLICES}")
        changes["vgpu_runlists"] = kept
    return dataclasses.replace(gpu, **changes) if changes else gpu


def check_gpu(gpu: GpuSample, instances: tuple[MigSample, ...], found: Found) -> GpuSample:
    """``gpu`` with ``instances`` (already admitted on identity) and every implausible reading set to None."""
    if gpu.vgpus:
        vgpus = _vgpus(gpu.vgpus, found, gpu_total=gpu.memory_total_bytes)
        if vgpus is not gpu.vgpus:
            gpu = dataclasses.replace(gpu, vgpus=vgpus)
    if gpu.vgpu_timeslice_seconds is not None or gpu.vgpu_runlists:
        gpu = _vgpu_scheduler(gpu, found)
    if _plausible_gpu(gpu):  # the common case, in straight-line code: only the instances are left to check
        total, link = gpu.memory_total_bytes, gpu.pcie_link_bytes_per_second
        ceiling = MAX_MEMORY_BYTES if total is None else total + MEMORY_SLACK_BYTES
        pcie = MAX_PCIE_BYTES_PER_SECOND if not link else PCIE_MARGIN * link
        admitted = tuple([mig if _plausible_mig(mig, ceiling, pcie) else _mig(mig, found, gpu_total=total, link=link)
                          for mig in instances])
        return gpu if admitted == gpu.instances else dataclasses.replace(gpu, instances=admitted)
    device = gpu.uuid
    changes: dict[str, Any] = {}
    total = _memory(gpu, device, found, changes, ceiling=None)
    _ranges(gpu, _GPU_RANGES, device, found, changes)
    clock = changes.get("sm_clock_mhz", gpu.sm_clock_mhz)
    maximum = changes.get("sm_clock_max_mhz", gpu.sm_clock_max_mhz)
    if clock is not None and maximum is not None and clock > maximum * CLOCK_MARGIN:
        found.add("clock", device, "sm_clock_mhz", clock, f"above the GPU's maximum SM clock {maximum} MHz")
        changes["sm_clock_mhz"] = None
    power, limit = changes.get("power_watts", gpu.power_watts), changes.get("power_limit_watts", gpu.power_limit_watts)
    if power is not None and limit is not None and power > limit * POWER_MARGIN:
        found.add("power", device, "power_watts", power, f"above {POWER_MARGIN} × the enforced limit {limit} W")
        changes["power_watts"] = None
    link = changes.get("pcie_link_bytes_per_second", gpu.pcie_link_bytes_per_second)
    _pcie(gpu, device, found, changes, link=link)
    processes = _processes(gpu.processes, device, found, total=total)
    if processes is not gpu.processes:
        changes["processes"] = processes
    ceiling = MAX_MEMORY_BYTES if total is None else total + MEMORY_SLACK_BYTES
    pcie = MAX_PCIE_BYTES_PER_SECOND if not link else PCIE_MARGIN * link
    admitted = tuple([mig if _plausible_mig(mig, ceiling, pcie) else _mig(mig, found, gpu_total=total, link=link)
                      for mig in instances])
    if admitted != gpu.instances:  # identity first: a tuple of the same objects compares equal at once
        changes["instances"] = admitted
    return dataclasses.replace(gpu, **changes) if changes else gpu


def check_xid(event: XidEvent, present: set[tuple[int, str]], found: Found) -> bool:
    """Whether the event is kept: it names a GPU of this sample (index and UUID) and its numbers can be real."""
    if (event.gpu_index, event.gpu_uuid) not in present:
        found.add("identity", "", "gpu_index", (event.gpu_index, event.gpu_uuid), "the event names no GPU of this "
                  "sample (index and UUID)")
        return False
    problem = None
    if not 0 <= event.xid <= MAX_XID:
        problem = ("xid", event.xid, f"Xid numbers are 0 … {MAX_XID}")
    elif not 0 <= event.event_type <= _MAX_MASK:
        problem = ("event_type", event.event_type, "nvmlEventType* is a 64-bit mask")
    elif not -_MAX_TIMESTAMP <= event.timestamp <= _MAX_TIMESTAMP:
        problem = ("timestamp", event.timestamp, "not a finite time")
    elif event.gpu_instance is not None and not 0 <= event.gpu_instance <= MAX_GPU_INSTANCE_ID:
        problem = ("gpu_instance", event.gpu_instance, f"GPU instance ids are 0 … {MAX_GPU_INSTANCE_ID}")
    elif event.compute_instance is not None and not 0 <= event.compute_instance <= MAX_COMPUTE_INSTANCE_ID:
        problem = ("compute_instance", event.compute_instance, f"compute instance ids are 0 … "
                                                               f"{MAX_COMPUTE_INSTANCE_ID}")
    if problem is None:
        return True
    found.add("xid", event.gpu_uuid, *problem)
    return False
