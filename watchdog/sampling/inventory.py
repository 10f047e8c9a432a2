"""What is on this node: physical GPUs and their MIG devices, looked up once and cached.

Handles, UUIDs, names and profiles do not change between ticks, and asking NVML for them every tick is the kind
of per-scrape re-enumeration that makes dcgm-exporter burn cores on MIG nodes (dcgm-exporter #599). They change
only when MIG is reconfigured, so the sampler enumerates again on a MIG-config-change event, on a MIG mode
change, or when a MIG handle goes stale — and otherwise reuses what is here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from watchdog.sampling.call_guard import CallGuard, GpuLost, nvml_code

MIG_NAME_MARK = " MIG "


@dataclass(slots=True)
class MigEntry:
    """One MIG device (compute instance) as enumerated: its handle and what identifies it."""

    uuid: str
    handle: Any
    gpu_instance: int
    compute_instance: int
    profile: str
    slot: int = -1  # index for nvmlDeviceGetMigDeviceHandleByIndex; -1: not known

    @property
    def identity(self) -> tuple[str, int, int]:
        return (self.uuid, self.gpu_instance, self.compute_instance)


@dataclass(slots=True)
class GpuEntry:
    """One physical GPU, its cached facts and the sampler's per-GPU state."""

    index: int
    handle: Any = None
    uuid: str = ""
    name: str = ""
    mig_enabled: bool = False
    instances: list[MigEntry] = field(default_factory=list)
    needs_enumeration: bool = True
    lost_since: float | None = None  # clock() when NVML last said GpuIsLost
    sm_clock_max_mhz: float | None = None
    gpm_supported: bool | None = None  # None: not asked yet


def text(value: Any) -> str:
    """NVML strings: pynvml decodes to str on Python 3, older bindings return bytes."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def profile_from_name(device_name: str) -> str:
    """The MIG profile from a MIG device name: ``NVIDIA H100 80GB HBM3 MIG 1g.10gb`` → ``1g.10gb``.

    nvmlDeviceGetName on a MIG handle returns ``<parent name> MIG <profile>`` (unprivileged, unlike the
    GPU-instance profile queries); the profile may carry ``+me`` or read ``Nc.Mg.XXgb`` when the compute instance
    is smaller than its GPU instance.
    """
    _, mark, profile = device_name.rpartition(MIG_NAME_MARK)
    return profile.strip() if mark else ""


def open_gpu(guard: CallGuard, entry: GpuEntry) -> None:
    """Fill handle, UUID and name of a physical GPU; raises GpuLost when NVML says so."""
    key = ("gpu", entry.index)
    if entry.handle is None:
        entry.handle = guard.call(key, "nvmlDeviceGetHandleByIndex", entry.index)
        if entry.handle is None:
            return
    if not entry.uuid:
        entry.uuid = text(guard.call(key, "nvmlDeviceGetUUID", entry.handle) or "")
    if not entry.name:
        entry.name = text(guard.call(key, "nvmlDeviceGetName", entry.handle) or "")


def read_mig_mode(nvml: ModuleType, guard: CallGuard, *, entry: GpuEntry) -> bool | None:
    """Current MIG mode (True/False), or None when it could not be read this tick.

    nvmlDeviceGetMigMode returns ``[current, pending]``; a GPU without MIG says NotSupported, which the guard
    remembers, so such a GPU reads as "not MIG" from then on without asking.
    """
    if guard.is_unsupported(entry.uuid, "nvmlDeviceGetMigMode"):
        return False
    modes = guard.call(entry.uuid, "nvmlDeviceGetMigMode", entry.handle)
    if modes is None:
        return False if guard.is_unsupported(entry.uuid, "nvmlDeviceGetMigMode") else None
    return int(modes[0]) == int(getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1))


@dataclass(slots=True)
class InstanceScan:
    """What one scan of a GPU's MIG slots found; ``complete`` is False when a slot could not be read."""

    found: list[MigEntry]
    complete: bool


def enumerate_instances(nvml: ModuleType, guard: CallGuard, *, entry: GpuEntry) -> InstanceScan | None:
    """Every MIG device of a GPU in MIG mode.

    Slots are sparse: nvmlDeviceGetMaxMigDeviceCount is the most there could be, and an empty slot answers
    NotFound (or InvalidArgument), so all of ``range(max)`` is scanned and a failing slot is skipped, never taken
    as the end of the list (go-nvlib's VisitMigDevices does the same). A slot that fails any other way (Unknown,
    Timeout, an identity call refused) keeps what the previous scan found there and makes the scan incomplete,
    so the sampler scans again next tick instead of losing the instance until the next MIG-config event.
    None: the scan could not be done now.
    """
    maximum = guard.call(entry.uuid, "nvmlDeviceGetMaxMigDeviceCount", entry.handle)
    if maximum is None:
        return None
    if not maximum:
        return InstanceScan(found=[], complete=True)
    empty = {nvml_code(nvml, "NVML_ERROR_NOT_FOUND"), nvml_code(nvml, "NVML_ERROR_INVALID_ARGUMENT")}
    previous = {mig.slot: mig for mig in entry.instances}
    found: list[MigEntry] = []
    complete = True
    for slot in range(int(maximum)):
        try:
            handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(entry.handle, slot)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) in empty:
                continue
            if getattr(exc, "value", None) == nvml_code(nvml, "NVML_ERROR_GPU_IS_LOST"):
                raise GpuLost(entry.uuid) from exc
            guard.counts.add("enumeration")
            handle = None
        except Exception:  # a broken binding costs this slot, not the scan
            guard.counts.add("unexpected")
            handle = None
        mig = None if handle is None else _describe_instance(guard, handle, parent=entry.uuid, slot=slot, empty=empty)
        if isinstance(mig, MigEntry):
            found.append(mig)
            continue
        complete = False
        if mig is not _GONE and slot in previous:
            found.append(previous[slot])  # unreadable now, not known to be gone: keep it until the next scan
    return InstanceScan(found=found, complete=complete)


_GONE = object()  # the instance was destroyed between the slot lookup and its description


def _describe_instance(guard: CallGuard, handle: Any, *, parent: str, slot: int, empty: set[int]) -> object:
    """A MigEntry, ``_GONE``, or None when an identity call failed some other way.

    Identity calls are not remembered as unsupported (``remember=False``): they are keyed by the parent, and one
    MIG device refusing nvmlDeviceGetUUID must not make every sibling unreadable for good.
    """
    key = ("mig-of", parent)
    values = []
    for function in ("nvmlDeviceGetUUID", "nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId"):
        guard.last_error_code = None
        value = guard.call(key, function, handle, remember=False)
        if value is None:
            return _GONE if guard.last_error_code in empty else None
        values.append(value)
    uuid, gi, ci = values
    name = guard.call(key, "nvmlDeviceGetName", handle, remember=False)
    return MigEntry(
        uuid=text(uuid),
        handle=handle,
        gpu_instance=int(gi),
        compute_instance=int(ci),
        profile=profile_from_name(text(name or "")),
        slot=slot,
    )
