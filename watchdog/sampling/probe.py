"""``gpu-watchdog probe``: what this node's driver actually answers to every call the sampler makes.

NVML's documentation leaves several behaviours open, and this agent was written without a GPU to confirm them (per-MIG
GPM support, which error a MIG handle gives, process calls on MIG parents, event calls on MIG handles, which GPM
metrics a driver answers: the context-switch counters need NVML 12.9+). The probe runs each call once per GPU and
per MIG device and reports "supported, with this value" or "failed, with this error", as JSON, so the first run on a
real node settles those questions. It only reads: it never changes MIG mode, clocks, power limits or persistence (the
event set it registers on is the probe's own and is freed, see probe_events). The report is JSON (``--json``); the
table a person reads first is probe_table's rendering of it.
"""

from __future__ import annotations

import ctypes
import functools
import time
from types import ModuleType
from typing import Any, Callable

from watchdog.sampling.call_guard import error_name, nvml_code
from watchdog.sampling.gpm import DRAM_BW_UTIL, PCIE_RX_PER_SEC, PCIE_TX_PER_SEC, SM_OCCUPANCY, SM_UTIL
from watchdog.sampling.inventory import text
from watchdog.sampling.probe_events import probe_events
from watchdog.sampling.probe_gpm import GR0_CTXSW, OTHER_ENGINES_CTXSW_ACTIVE_PCT, probe_gpm
from watchdog.sampling.probe_vgpu import probe_vgpu
from watchdog.sampling.processes import PROCESS_LISTS

# The process lists the sampler asks on every device, MIG handles included: each unversioned call (_v3 underneath)
# and its _v2 fallback.
_PROCESS_CALLS = tuple(name for lists in PROCESS_LISTS for name in (lists.call, lists.fallback))

# (label, function, constant holding the argument, its value in nvml.h)
_GPU_CALLS_WITH_ARGUMENT = (
    ("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo", "nvmlMemory_v2", 0x02000028),
    ("nvmlDeviceGetTemperature(GPU)", "nvmlDeviceGetTemperature", "NVML_TEMPERATURE_GPU", 0),
    ("nvmlDeviceGetClockInfo(SM)", "nvmlDeviceGetClockInfo", "NVML_CLOCK_SM", 1),
    ("nvmlDeviceGetMaxClockInfo(SM)", "nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_SM", 1),
    ("nvmlDeviceGetPcieThroughput(TX)", "nvmlDeviceGetPcieThroughput", "NVML_PCIE_UTIL_TX_BYTES", 0),
    ("nvmlDeviceGetPcieThroughput(RX)", "nvmlDeviceGetPcieThroughput", "NVML_PCIE_UTIL_RX_BYTES", 1),
)


def jsonable(value: Any, depth: int = 0) -> Any:
    """NVML answers (ctypes structs, friendly objects, bytes, c_uint) as plain JSON values."""
    if depth > 4:
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return text(value)
    if isinstance(value, ctypes._SimpleCData):  # e.g. nvmlDeviceIsMigDeviceHandle's raw c_uint
        return jsonable(value.value, depth + 1)
    if isinstance(value, (ctypes._Pointer, ctypes.c_void_p)):
        return f"<handle 0x{ctypes.cast(value, ctypes.c_void_p).value or 0:x}>"
    if isinstance(value, (ctypes.Structure, ctypes.Union)):  # a union (c_nvmlValue_t) shows each reading of it
        return {name: jsonable(getattr(value, name), depth + 1) for name, *_ in value._fields_}
    if isinstance(value, (list, tuple, ctypes.Array)):
        return [jsonable(item, depth + 1) for item in list(value)[:64]]
    if isinstance(value, dict):
        return {str(key): jsonable(item, depth + 1) for key, item in value.items()}
    if hasattr(value, "__dict__"):
        return {key: jsonable(item, depth + 1) for key, item in vars(value).items() if not key.startswith("_")}
    return repr(value)


class _Recorder:
    def __init__(self, nvml: ModuleType) -> None:
        self.nvml = nvml

    def __call__(self, report: dict[str, Any], label: str, function: str, *args: Any) -> Any:
        """Call ``nvml.<function>``; record ``{"supported": True, "value": …}`` or the error's name."""
        try:
            value = getattr(self.nvml, function)(*args)
        except Exception as exc:  # every answer is a finding here, including a missing symbol
            report[label] = {"supported": False, "error": error_name(self.nvml, exc), "detail": str(exc)}
            return None
        report[label] = {"supported": True, "value": jsonable(value)}
        return value


def probe(
    nvml: ModuleType,
    *,
    sleep: Callable[[float], None] = time.sleep,
    gpm_interval_seconds: float = 0.2,
    event_wait_ms: int = 100,
) -> dict:
    """A JSON-able report of every sampler call on every GPU and MIG device; initialises and shuts NVML down."""
    record = _Recorder(nvml)
    report: dict[str, Any] = {"gpus": []}
    record(report, "nvmlInit", "nvmlInit")
    if not report["nvmlInit"]["supported"]:
        return report
    try:
        record(report, "nvmlSystemGetDriverVersion", "nvmlSystemGetDriverVersion")
        record(report, "nvmlSystemGetNVMLVersion", "nvmlSystemGetNVMLVersion")
        count = record(report, "nvmlDeviceGetCount", "nvmlDeviceGetCount") or 0
        gpm_streams: list[tuple[dict[str, Any], Callable[[Any], Any], tuple[int, ...]]] = []
        parents: list[tuple[int, Any]] = []
        mig_handle = None
        for index in range(int(count)):
            gpu: dict[str, Any] = {"index": index, "calls": {}, "mig_devices": []}
            report["gpus"].append(gpu)
            handle = record(gpu["calls"], "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByIndex", index)
            if handle is not None:
                parents.append((index, handle))
                mig_handle = _probe_gpu(record, nvml, gpu=gpu, handle=handle, gpm_streams=gpm_streams) or mig_handle
        report["gpm"] = probe_gpm(record, nvml, gpm_streams, sleep=sleep, interval=gpm_interval_seconds)
        report["events"] = probe_events(
            nvml, record=record, parents=parents, mig_handle=mig_handle, wait_ms=event_wait_ms
        )
    finally:
        record(report, "nvmlShutdown", "nvmlShutdown")
    return report


def _probe_gpu(record: _Recorder, nvml: ModuleType, *, gpu: dict, handle: Any, gpm_streams: list) -> Any:
    """Every call on one GPU and its MIG devices; returns one MIG handle (None without MIG) for the events probe."""
    calls = gpu["calls"]
    for function in (
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetName",
        "nvmlDeviceGetPersistenceMode",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlDeviceGetCurrPcieLinkGeneration",
        "nvmlDeviceGetCurrPcieLinkWidth",
        *_PROCESS_CALLS,
        "nvmlDeviceGetSupportedEventTypes",
        "nvmlGpmQueryDeviceSupport",
        "nvmlDeviceGetMemoryInfo",
    ):
        record(calls, function, function, handle)
    for label, function, constant, header_value in _GPU_CALLS_WITH_ARGUMENT:
        record(calls, label, function, handle, getattr(nvml, constant, header_value))
    record(calls, "nvmlDeviceGetProcessUtilization", "nvmlDeviceGetProcessUtilization", handle, 0)
    probe_vgpu(record, gpu=gpu, handle=handle)
    uuid = calls["nvmlDeviceGetUUID"].get("value", f"gpu{gpu['index']}")
    gpu["uuid"] = uuid
    gpm = bool(calls["nvmlGpmQueryDeviceSupport"].get("value", {}).get("isSupportedDevice"))
    if gpm:
        gpm_streams.append((gpu, lambda sample: nvml.nvmlGpmSampleGet(handle, sample),
                            (SM_UTIL, DRAM_BW_UTIL) + GR0_CTXSW + OTHER_ENGINES_CTXSW_ACTIVE_PCT))
    maximum = calls["nvmlDeviceGetMaxMigDeviceCount"].get("value") or 0
    empty = {nvml_code(nvml, "NVML_ERROR_NOT_FOUND"), nvml_code(nvml, "NVML_ERROR_INVALID_ARGUMENT")}
    gpm_gis: set[int] = set()
    first_mig = None
    for slot in range(int(maximum)):
        mig: dict[str, Any] = {"slot": slot, "calls": {}}
        lookup = "nvmlDeviceGetMigDeviceHandleByIndex"
        mig_handle = record(mig["calls"], lookup, lookup, handle, slot)
        if mig_handle is None:
            if mig["calls"][lookup]["error"] not in _names(nvml, empty):  # an empty slot is not news
                gpu["mig_devices"].append(mig)
            continue
        gpu["mig_devices"].append(mig)
        first_mig = mig_handle if first_mig is None else first_mig
        _probe_mig(record, nvml, mig=mig, handle=mig_handle)
        gi = mig["calls"]["nvmlDeviceGetGpuInstanceId"].get("value")
        if gpm:
            gpm_streams.append((mig, lambda s, h=mig_handle: nvml.nvmlGpmSampleGet(h, s),
                                (SM_UTIL, SM_OCCUPANCY) + GR0_CTXSW))
            if gi is not None and gi not in gpm_gis:
                gpm_gis.add(gi)
                gi_report = {"gpu_instance": gi}
                gpu.setdefault("gpu_instances", []).append(gi_report)
                # DRAM bandwidth per GPU instance: the parent handle plus the GI id (DCGM's DcgmGpmManager); PCIe
                # too, where the driver answers it per GI (the PCIe contention domain needs it).
                take = functools.partial(nvml.nvmlGpmMigSampleGet, handle, gi)
                gpm_streams.append((gi_report, take, (DRAM_BW_UTIL, PCIE_TX_PER_SEC, PCIE_RX_PER_SEC) + GR0_CTXSW))
    return first_mig


def _names(nvml: ModuleType, codes: set[int]) -> set[str]:
    names = set()
    for code in codes:
        try:
            names.add(error_name(nvml, nvml.NVMLError(code)))
        except Exception:
            continue
    return names


def _probe_mig(record: _Recorder, nvml: ModuleType, *, mig: dict, handle: Any) -> None:
    calls = mig["calls"]
    for function in (
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetName",
        "nvmlDeviceIsMigDeviceHandle",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
        "nvmlDeviceGetAttributes",
        *_PROCESS_CALLS,
        "nvmlDeviceGetMemoryInfo",
        "nvmlGpmQueryDeviceSupport",
    ):
        record(calls, function, function, handle)
    record(calls, "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo", handle, _memory_v2(nvml))


def _memory_v2(nvml: ModuleType) -> int:
    return getattr(nvml, "nvmlMemory_v2", 0x02000028)
