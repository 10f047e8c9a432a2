"""The vGPUs a vGPU host GPU serves to virtual machines (KubeVirt VMs, on a node with the NVIDIA vGPU manager).

On such a node the tenants' work runs inside VMs, so NVML's process lists on the host show no tenant process; the
host-side vGPU calls are the agent's only view of who uses the GPU. Most GPUs are no vGPU host, and the agent must
not pay for the question every tick: each GPU is asked ``nvmlDeviceGetVirtualizationMode`` until it answers once,
and only a GPU that answers ``NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU`` is ever asked a vGPU call; a vGPU call
that answers NotSupported there is not asked again (the call guard remembers it under the GPU's vGPU key).

A vGPU instance's identity (UUID, VM, type, framebuffer size, GPU instance) holds for its life, so it is read
when the instance appears and kept while it stays active; framebuffer use and utilisation are read every tick.
Utilisation comes from ``nvmlDeviceGetVgpuInstancesUtilizationInfo`` (the versioned call, whose struct also carries
JPEG and OFA use), or from ``nvmlDeviceGetVgpuUtilization`` on a driver that answers the newer call NotSupported or
FunctionNotFound (the call guard remembers that per GPU, so the newer call is asked once there). Both, like
per-process utilisation, return the samples newer than the timestamp they are given and NotFound when none is (NVML
API reference, docs.nvidia.com/deploy/nvml-api, "vGPU Utilization and Accounting"). pynvml drops the sample value
type; the driver reports percentages as unsigned ints (``uiVal``), as nvidia-smi's ``vgpu -u`` prints them.

The scheduler's state (policy, adaptive round-robin, time slice) is read every tick; its log
(``nvmlDeviceGetVgpuSchedulerLog``: the last NVML_SCHEDULER_SW_MAX_LOG_ENTRIES time slices, per software runlist
its cumulative run time) every ``log_every_ticks``, its answer kept between reads (NVML API reference, "vGPU
Management": ``nvmlVgpuSchedulerLog_t``, ``nvmlVgpuSchedulerLogEntry_t``; times in ns). nvml.h declares
``nvmlVgpuInstanceGetFbUsage``'s answer ``unsigned long long *`` but pynvml 13.615.71 passes a 4-byte ``c_uint`` for
it (an 8-byte write past it, and use wrapped at 4 GiB): sampling/nvml_library.py replaces that binding with one that
passes a ``c_ulonglong`` when it loads pynvml.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

from watchdog.model import NOT_ATTRIBUTABLE, VgpuRunlist, VgpuSample
from watchdog.sampling.call_guard import CallGuard, nvml_code
from watchdog.sampling.inventory import text

UTILISATION_CALL = "nvmlDeviceGetVgpuUtilization"  # the fallback for drivers without the versioned call
UTILISATION_INFO_CALL = "nvmlDeviceGetVgpuInstancesUtilizationInfo"
SCHEDULER_LOG_CALL = "nvmlDeviceGetVgpuSchedulerLog"
ARR_MODES = {0: "default", 1: "disabled", 2: "enabled"}  # NVML_VGPU_SCHEDULER_ARR_*
VM_ID_TYPES = {0: "domain_id", 1: "uuid"}  # NVML_VGPU_VM_ID_DOMAIN_ID, NVML_VGPU_VM_ID_UUID
SCHEDULER_POLICIES = {1: "best_effort", 2: "equal_share", 3: "fixed_share"}  # NVML_VGPU_SCHEDULER_POLICY_*


@dataclass(frozen=True, slots=True)
class _Identity:
    uuid: str
    type_name: str
    vm_id: str
    vm_id_type: str
    fb_total_bytes: int | None
    gpu_instance: int | None


@dataclass(frozen=True, slots=True)
class VgpuHostReading:
    """What one tick read of a GPU's vGPU host calls: empty on a GPU that is no vGPU host."""

    vgpus: tuple[VgpuSample, ...] = ()
    scheduler: str | None = None  # policy, one of model.VGPU_SCHEDULERS or "unknown"
    arr: str | None = None  # adaptive round-robin: "enabled", "disabled" or "default"
    timeslice_seconds: float | None = None
    runlists: tuple[VgpuRunlist, ...] = ()


_NOT_A_HOST = VgpuHostReading()


@dataclass(slots=True)
class _Host:
    """What is known of one GPU: whether it hosts vGPUs and, if so, its vGPUs and their last utilisation."""

    is_host: bool | None = None  # None: not known yet (the mode call has not answered)
    identities: dict[int, _Identity] = field(default_factory=dict)  # vGPU instance id → identity
    last_seen_us: int | None = None
    utilisation: dict[int, tuple[tuple[float, float, float, float], float]] = field(default_factory=dict)
    ticks: int = 0  # reads of this host, for the scheduler log's pace
    runlists: tuple[VgpuRunlist, ...] = ()  # the last scheduler log's answer


class VgpuReader:
    """Reads a GPU's vGPUs through the call guard; ``read`` is cheap (one remembered answer) on other GPUs."""

    def __init__(self, nvml: ModuleType, guard: CallGuard, *, clock: Callable[[], float], hold_seconds: float,
                 log_every_ticks: int = 10) -> None:
        self._guard = guard
        self._log_every_ticks = log_every_ticks
        self._clock = clock
        self._hold_seconds = hold_seconds
        self._host_mode = getattr(nvml, "NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU", 3)
        self._nothing_new = (nvml_code(nvml, "NVML_ERROR_NOT_FOUND"), nvml_code(nvml, "NVML_SUCCESS"))
        self._gone = (nvml_code(nvml, "NVML_ERROR_NOT_FOUND"),)  # the instance stopped between two calls
        self._hosts: dict[str, _Host] = {}

    def read(self, gpu_uuid: str, handle: Any) -> VgpuHostReading:
        """The GPU's active vGPUs and scheduler; an empty reading on a GPU that is no vGPU host."""
        host = self._hosts.setdefault(gpu_uuid, _Host())
        key = ("vgpu", gpu_uuid)
        if host.is_host is None:
            mode = self._guard.call(key, "nvmlDeviceGetVirtualizationMode", handle)
            if mode is None and not self._guard.is_unsupported(key, "nvmlDeviceGetVirtualizationMode"):
                return _NOT_A_HOST  # a transient failure: ask again next tick
            host.is_host = mode is not None and int(mode) == self._host_mode
        if not host.is_host:
            return _NOT_A_HOST
        if host.ticks % self._log_every_ticks == 0:
            runlists = self._scheduler_log(key, handle)
            if runlists is not None:  # a failed read keeps the last answer until the next read
                host.runlists = runlists
        host.ticks += 1
        active = self._guard.call(key, "nvmlDeviceGetActiveVgpus", handle)
        if active is None:
            return self._scheduler(key, handle, host.runlists)
        instances = [int(instance) for instance in active]
        for gone in host.identities.keys() - set(instances):
            del host.identities[gone]
            host.utilisation.pop(gone, None)
        shares = self._utilisation(key, handle, host)
        samples = []
        for instance in instances:
            identity = host.identities.get(instance) or self._identity(key, instance)
            if identity is None:
                continue  # gone before it could be named; the next tick sees whether it is back
            host.identities[instance] = identity
            used = self._guard.call(key, "nvmlVgpuInstanceGetFbUsage", instance, quiet_codes=self._gone)
            sm, memory, encoder, decoder = shares.get(instance, (None, None, None, None))
            samples.append(VgpuSample(
                uuid=identity.uuid, type_name=identity.type_name, vm_id=identity.vm_id,
                vm_id_type=identity.vm_id_type, fb_used_bytes=None if used is None else int(used),
                fb_total_bytes=identity.fb_total_bytes, gpu_instance=identity.gpu_instance, sm_util=sm,
                memory_util=memory, encoder_util=encoder, decoder_util=decoder))
        return dataclasses.replace(self._scheduler(key, handle, host.runlists), vgpus=tuple(samples))

    def _scheduler(self, key: tuple[str, str], handle: Any, runlists: tuple[VgpuRunlist, ...]) -> VgpuHostReading:
        state = self._guard.call(key, "nvmlDeviceGetVgpuSchedulerState", handle)
        if state is None:
            return VgpuHostReading(runlists=runlists)
        arr = int(state.arrMode)
        params = state.schedulerParams  # a union: the ARR variant while ARR is on (nvmlVgpuSchedulerParams_t)
        with_arr = ARR_MODES.get(arr) == "enabled"
        slice_ns = int(params.vgpuSchedDataWithARR.timeslice if with_arr else params.vgpuSchedData.timeslice)
        return VgpuHostReading(scheduler=SCHEDULER_POLICIES.get(int(state.schedulerPolicy), "unknown"),
                               arr=ARR_MODES.get(arr, "unknown"),
                               timeslice_seconds=slice_ns / 1e9 if slice_ns else None, runlists=runlists)

    def _scheduler_log(self, key: tuple[str, str], handle: Any) -> tuple[VgpuRunlist, ...] | None:
        """Per software runlist of the log: its newest cumulative run and preemption time, and its entries; None
        when the call failed."""
        log = self._guard.call(key, SCHEDULER_LOG_CALL, handle)
        if log is None:
            return None
        newest: dict[int, Any] = {}
        slices: dict[int, int] = {}
        for entry in log.logEntries[:min(int(log.entriesCount), len(log.logEntries))]:
            runlist = int(entry.swRunlistId)
            slices[runlist] = slices.get(runlist, 0) + 1
            if runlist not in newest or int(entry.timestamp) >= int(newest[runlist].timestamp):
                newest[runlist] = entry
        return tuple(VgpuRunlist(runlist=runlist, run_seconds=int(entry.timeRunTotal) / 1e9, slices=slices[runlist],
                                 preemption_seconds=int(entry.cumulativePreemptionTime) / 1e9)
                     for runlist, entry in sorted(newest.items()))

    def _identity(self, key: tuple[str, str], instance: int) -> _Identity | None:
        guard, quiet = self._guard, self._gone
        uuid = guard.call(key, "nvmlVgpuInstanceGetUUID", instance, quiet_codes=quiet)
        vm = guard.call(key, "nvmlVgpuInstanceGetVmID", instance, quiet_codes=quiet)
        type_id = guard.call(key, "nvmlVgpuInstanceGetType", instance, quiet_codes=quiet)
        if uuid is None or vm is None or type_id is None:
            return None
        name = guard.call(key, "nvmlVgpuTypeGetName", type_id)
        total = guard.call(key, "nvmlVgpuTypeGetFramebufferSize", type_id)
        gpu_instance = guard.call(key, "nvmlVgpuInstanceGetGpuInstanceId", instance, quiet_codes=quiet)
        vm_id, vm_id_type = vm
        return _Identity(
            uuid=text(uuid), type_name="" if name is None else text(name), vm_id=text(vm_id),
            vm_id_type=VM_ID_TYPES.get(int(vm_id_type), "unknown"),
            fb_total_bytes=None if total is None else int(total),
            gpu_instance=None if gpu_instance is None or int(gpu_instance) == NOT_ATTRIBUTABLE else int(gpu_instance))

    def _utilisation(self, key: tuple[str, str], handle: Any, host: _Host) -> dict[int, tuple]:
        """Instance → (sm, memory, encoder, decoder) 0–1, each kept ``hold_seconds`` after its newest sample."""
        now = self._clock()
        rows = None
        if not self._guard.is_unsupported(key, UTILISATION_INFO_CALL):
            rows = self._guard.call(key, UTILISATION_INFO_CALL, handle, host.last_seen_us or 0,
                                    quiet_codes=self._nothing_new)
        if self._guard.is_unsupported(key, UTILISATION_INFO_CALL):  # an older driver: the unversioned call
            rows = self._guard.call(key, UTILISATION_CALL, handle, host.last_seen_us or 0,
                                    quiet_codes=self._nothing_new)
        seen_before = host.last_seen_us
        for row in rows or ():
            stamp = int(row.timeStamp)
            if seen_before is not None and stamp <= seen_before:
                continue
            shares = tuple(min(int(value.uiVal) / 100.0, 1.0)
                           for value in (row.smUtil, row.memUtil, row.encUtil, row.decUtil))
            host.utilisation[int(row.vgpuInstance)] = (shares, now)
            host.last_seen_us = stamp if host.last_seen_us is None else max(host.last_seen_us, stamp)
        for instance in [i for i, (_, seen) in host.utilisation.items() if now - seen > self._hold_seconds]:
            del host.utilisation[instance]
        return {instance: shares for instance, (shares, _) in host.utilisation.items()}
