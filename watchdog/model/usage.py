"""What each pod uses of each device in one tick, summed once from NVML's per-process numbers.

Detection (who contends with whom, whose memory grows, which tenant is over quota) and publishing (the per-pod
series of a shared GPU) read the same sums, so a finding and a dashboard can never disagree about a pod's use.
The sums depend on which PIDs the attribution gives to which pod, and
the service may take a PID back after the join (a process held back until the kubelet confirms its pod), so
``Attribution.usage`` derives them from its own ``processes`` on first read rather than storing a copy that
could go stale.

Only what NVML measured per process is summed here. How a consumer fills a gap is its own rule: detection gives
the only pod of an exclusive device that device's totals; the published per-pod series stay measured only.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping

from watchdog.model.samples import MigSample, NodeSample, ProcessSample

if TYPE_CHECKING:  # pods.py imports this module; the reference back is for annotations only
    from watchdog.model.pods import PodRef


@dataclass(frozen=True, slots=True)
class PodUsage:
    """One (device, pod, container)'s use this tick: each field sums its processes' values, and is None when none
    of them reported it. ``ref`` None gathers the processes no known pod owns."""

    ref: PodRef | None
    memory_bytes: int | None = None
    sm_util: float | None = None  # 0–1 of the device; only GPUs not in MIG mode report it per process
    memory_util: float | None = None  # 0–1, share of time the memory controller served these processes


DeviceUsage = Mapping[str, tuple[PodUsage, ...]]
"""Device UUID (a MIG instance, or a GPU not in MIG mode) → its users, in the order their first process appears."""


def device_usage(sample: NodeSample, owners: Mapping[int, PodRef], skip: frozenset[int] = frozenset()) -> DeviceUsage:
    """Sum every process of the sample once into its (device, pod, container); ``owners`` maps PID → pod.

    PIDs in ``skip`` (node infrastructure: the MPS server, which holds its clients' contexts) are nobody's use and
    are left out, so their memory is never summed with the clients' nor shown as unowned.

    Containers are told apart by name (a ref without one is the pod's sandbox, named ""), pods by namespace/name,
    the key every published series and every detection map uses. Lost GPUs and devices without processes are left
    out.
    """
    usage: dict[str, tuple[PodUsage, ...]] = {}
    for gpu in sample.gpus:
        if gpu.lost:
            continue
        processes = _without(gpu.processes, skip)
        if processes:
            usage[gpu.uuid] = _users(processes, owners)
        for mig in gpu.instances:
            processes = _without(_own_processes(mig), skip)
            if processes:
                usage[mig.uuid] = _users(processes, owners)
    return MappingProxyType(usage)


def _without(processes: tuple[ProcessSample, ...], skip: frozenset[int]) -> tuple[ProcessSample, ...]:
    if not skip or not any(p.pid in skip for p in processes):
        return processes
    return tuple(p for p in processes if p.pid not in skip)


def _own_processes(mig: MigSample) -> tuple[ProcessSample, ...]:
    """The processes of this compute instance. Should a driver list a GPU instance's processes on each of its CI
    handles, a process is counted on its own CI only (nvmlProcessInfo_v3 names its GI and CI ids); one without ids
    (NVML's 0xFFFFFFFF) stays where NVML listed it."""
    own = (mig.gpu_instance, mig.compute_instance)
    if all(p.compute_instance is None or (p.gpu_instance, p.compute_instance) == own for p in mig.processes):
        return mig.processes
    return tuple(p for p in mig.processes
                 if p.compute_instance is None or (p.gpu_instance, p.compute_instance) == own)


def _users(processes: tuple[ProcessSample, ...], owners: Mapping[int, PodRef]) -> tuple[PodUsage, ...]:
    if len(processes) == 1:  # the common MIG case: the sums are that process's own values
        process = processes[0]
        return (PodUsage(owners.get(process.pid), process.used_memory_bytes, process.sm_util, process.memory_util),)
    groups: dict[tuple[str, str, str] | None, list] = {}
    for process in processes:
        ref = owners.get(process.pid)
        key = None if ref is None else (ref.namespace, ref.name, ref.container or "")
        group = groups.get(key)
        if group is None:
            groups[key] = [ref, process.used_memory_bytes, process.sm_util, process.memory_util]
            continue
        for slot, value in ((1, process.used_memory_bytes), (2, process.sm_util), (3, process.memory_util)):
            if value is not None:
                current = group[slot]
                group[slot] = value if current is None else current + value
    return tuple(PodUsage(*group) for group in groups.values())
