"""Join one NVML sample with the kubelet's assignments, the /proc cgroup answers and the pod cache.

Pure: no I/O, no asyncio, no clock; every input is plain data handed in by the service, so this is table-tested and
benchmarked alone. Two rules carry the safety story:

- A device is attributed only to pods the API still has *and* that are live. The kubelet keeps listing a pod's
  devices until it has torn the pod down, so a Succeeded/Failed or deleting pod would otherwise keep "owning" its
  GPU (stale attribution after the pod ends is a complaint users of existing GPU exporters raise).
- ``healthy`` is false whenever the kubelet or the API could not be read: then an absence proves nothing, and the
  downstream stages must not call a process "unauthorized" or act on it.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Iterable, Iterator, Mapping

from watchdog.attribution.pods import container_name_of
from watchdog.model import Attribution, DeviceAssignment, NodeSample, PodIndex, PodRef, ProcessSample


def attribute(
    sample: NodeSample,
    *,
    assignments: Iterable[DeviceAssignment],
    index: PodIndex,
    proc: Mapping[int, tuple[str, str | None]],
    kubelet_ok: bool,
    api_ok: bool,
) -> Attribution:
    """Who owns what at this tick.

    ``devices``: GPU/MIG UUID → the live pods (with container) the kubelet assigned it to, several on a time-sliced
    GPU. When the API is unreadable the cache may simply be behind, so a pod missing from it is still named from the
    kubelet's word (no UID); the attribution is then unhealthy and nothing acts on it.
    ``processes``: every PID NVML reported that /proc places in a pod the cache knows (live or not: a terminating
    pod's process really is that pod's). ``index`` is the pod cache's frozen index (``PodCache.index``), built once
    per cache change and carried on in the attribution, with its tenant rule, for every later stage. What each pod
    uses of each device is summed from ``processes`` when a stage first asks (``Attribution.usage``), so a PID
    taken back later (the service's hold-back of unconfirmed pairs) is never counted for its pod.
    """
    devices: dict[str, list[PodRef]] = {}
    for assignment in assignments:
        ref = _device_owner(assignment, index, api_ok=api_ok)
        if ref is None:
            continue
        owners = devices.setdefault(assignment.device_id, [])
        if ref not in owners:  # one container holding two replicas of one time-sliced GPU is still one owner
            owners.append(ref)
    processes: dict[int, PodRef] = {}
    for process in _processes(sample):
        found = proc.get(process.pid)
        if found is None or process.pid in processes:
            continue
        pod_uid, container_id = found
        pod = index.by_cgroup_uid(pod_uid)
        if pod is None:
            continue
        processes[process.pid] = PodRef(pod.namespace, pod.name, pod.uid, container_name_of(pod, container_id))
    return Attribution(
        devices=MappingProxyType({uuid: tuple(refs) for uuid, refs in devices.items()}),
        processes=MappingProxyType(processes),
        index=index,
        healthy=kubelet_ok and api_ok,
        kubelet_ok=kubelet_ok,
        api_ok=api_ok,
    )


def unknown_devices(sample: NodeSample, assignments: Iterable[DeviceAssignment]) -> tuple[str, ...]:
    """UUIDs of devices running processes that no assignment names: candidates for ``note_unknown``.

    Idle unassigned devices are left out on purpose: they are normal (free capacity) and must not cost kubelet
    calls. A MIG-enabled GPU is judged by its instances, since the device plugin assigns those, not the parent.
    """
    assigned = {assignment.device_id for assignment in assignments}
    unknown: list[str] = []
    for gpu in sample.gpus:
        if gpu.lost:
            continue
        if gpu.mig_enabled:
            unknown.extend(mig.uuid for mig in gpu.instances if mig.processes and mig.uuid not in assigned)
        elif gpu.processes and gpu.uuid not in assigned:
            unknown.append(gpu.uuid)
    return tuple(unknown)


def unresolvable_device_ids(assignments: Iterable[DeviceAssignment]) -> tuple[str, ...]:
    """Device IDs that are not NVML UUIDs, so no sampled device can ever match them.

    The NVIDIA device plugin names devices by UUID by default, but ``deviceIDStrategy=index`` gives "0", "1" …
    and other plugins use their own names ("nvidia0"). Joined by UUID, every such assignment would silently miss,
    and every GPU process would look like one its pod was never given: the kubelet side must count as unreadable.
    """
    return tuple(sorted({a.device_id for a in assignments if not a.device_id.startswith(("GPU-", "MIG-"))}))


def unassigned_processes(sample: NodeSample, attribution: Attribution) -> dict[int, tuple[str, str]]:
    """PID → (device UUID, pod key) for processes whose pod is not among the device's assigned owners.

    These are what "unauthorized use" is judged on; the service holds each new pair back until a kubelet List that
    started after it was first seen confirms it (a pod that just got the device is not yet in the last List).
    """
    found: dict[int, tuple[str, str]] = {}
    for gpu in sample.gpus:
        places = [(mig.uuid, mig.processes) for mig in gpu.instances] if gpu.mig_enabled else [(gpu.uuid, gpu.processes)]
        for uuid, processes in places:
            owners = {ref.key for ref in attribution.devices.get(uuid, ())}
            for process in processes:
                ref = attribution.processes.get(process.pid)
                if ref is not None and ref.key not in owners:
                    found[process.pid] = (uuid, ref.key)
    return found


def _device_owner(assignment: DeviceAssignment, index: PodIndex, *, api_ok: bool) -> PodRef | None:
    pod = index.by_name(assignment.namespace, assignment.pod)
    if pod is None:
        if api_ok:
            return None  # the API has no such pod: the kubelet's entry is stale
        return PodRef(assignment.namespace, assignment.pod, "", assignment.container)
    if not pod.live:
        return None
    return PodRef(pod.namespace, pod.name, pod.uid, assignment.container)


def _processes(sample: NodeSample) -> Iterator[ProcessSample]:
    for gpu in sample.gpus:
        yield from gpu.processes
        for mig in gpu.instances:
            yield from mig.processes

