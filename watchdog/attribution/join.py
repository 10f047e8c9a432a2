"""Join one NVML sample with the kubelet's assignments, the /proc cgroup answers and the pod cache.

Pure: no I/O, no asyncio, no clock; every input is plain data handed in by the stage (``stage.NodeAttributor``), so
this is table-tested and benchmarked alone. Two rules carry the safety story:

- A device is attributed only to pods the API still has *and* that are live. The kubelet keeps listing a pod's
  devices until it has torn the pod down, so a Succeeded/Failed or deleting pod would otherwise keep "owning" its
  GPU (stale attribution after the pod ends is a complaint users of existing GPU exporters raise).
- ``healthy`` is false whenever the kubelet or the API could not be read: then an absence proves nothing, and the
  downstream stages must not call a process "unauthorized" or act on it.

Devices allocated through Dynamic Resource Allocation join in two steps: ``resolve_claim_devices`` turns the
kubelet's (claim, driver, pool, device) tuples into ordinary assignments through the driver's ResourceSlices, and
whatever no slice names yet (a MIG device created at claim time, before its slice is updated) is handed back so the
stage can hold those pods' processes back instead of judging them.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Iterable, Iterator, Mapping

from watchdog.attribution.pods import container_name_of
from watchdog.model import (EMPTY, Attribution, ClaimDevice, ClaimRef, DeviceAssignment, DeviceSharing, HostProcess,
                            NodeSample, PodIndex, PodRef, ProcessSample, SliceDevice, SliceKey)


def attribute(
    sample: NodeSample,
    *,
    assignments: Iterable[DeviceAssignment],
    index: PodIndex,
    proc: Mapping[int, tuple[str, str | None]],
    kubelet_ok: bool,
    api_ok: bool,
    hosts: Mapping[int, HostProcess] | None = None,
    infrastructure: frozenset[int] = frozenset(),
    sharing: Mapping[str, DeviceSharing] = EMPTY,
) -> Attribution:
    """Who owns what at this tick.

    ``devices``: GPU/MIG UUID → the live pods (with container) the kubelet assigned it to, several on a time-sliced
    GPU. When the API is unreadable the cache may simply be behind, so a pod missing from it is still named from the
    kubelet's word (no UID); the attribution is then unhealthy and nothing acts on it.
    ``processes``: every PID NVML reported that /proc places in a pod the cache knows (live or not: a terminating
    pod's process really is that pod's). ``index`` is the pod cache's frozen index (``PodCache.index``), built once
    per cache change and carried on in the attribution, with its tenant rule, for every later stage. What each pod
    uses of each device is summed from ``processes`` when a stage first asks (``Attribution.usage``), so a PID
    taken back later (``stage.NodeAttributor``'s hold-back of unconfirmed pairs) is never counted for its pod.
    ``host_processes``: the PIDs NVML reported that ``hosts`` (the /proc reader's) places in no pod at all.
    ``infrastructure``: the PIDs of ``infrastructure`` (the MPS server, by the /proc reader's ``comm``) that NVML
    reported; they are neither a pod's nor a host process, so no usage sum, unauthorized-use or host-process
    judgement ever sees them (the server holds its clients' contexts; the clients are listed and counted).
    ``sharing``: GPU UUID → how the device plugin shares it (``sharing.device_sharing``), carried on as it is.
    """
    devices: dict[str, list[PodRef]] = {}
    claims: dict[tuple[str, str], ClaimRef] = {}
    for assignment in assignments:
        ref = _device_owner(assignment, index, api_ok=api_ok)
        if ref is None:
            continue
        if assignment.claim is not None:
            claims[(assignment.device_id, ref.key)] = assignment.claim
        owners = devices.setdefault(assignment.device_id, [])
        if ref not in owners:  # one container holding two replicas of one time-sliced GPU is still one owner
            owners.append(ref)
    processes: dict[int, PodRef] = {}
    seen_infrastructure = {process.pid for process in _processes(sample) if process.pid in infrastructure}
    for process in _processes(sample):
        found = proc.get(process.pid)
        if found is None or process.pid in processes or process.pid in infrastructure:
            continue
        pod_uid, container_id = found
        pod = index.by_cgroup_uid(pod_uid)
        if pod is None:
            continue
        processes[process.pid] = PodRef(pod.namespace, pod.name, pod.uid, container_name_of(pod, container_id))
    host_processes = {process.pid: hosts[process.pid] for process in _processes(sample)
                      if hosts and process.pid in hosts and process.pid not in processes
                      and process.pid not in infrastructure}
    return Attribution(
        devices=MappingProxyType({uuid: tuple(refs) for uuid, refs in devices.items()}),
        processes=MappingProxyType(processes),
        index=index,
        claims=MappingProxyType(claims),
        healthy=kubelet_ok and api_ok,
        kubelet_ok=kubelet_ok,
        api_ok=api_ok,
        host_processes=MappingProxyType(host_processes) if host_processes else EMPTY,
        infrastructure=frozenset(seen_infrastructure),
        sharing=sharing,
    )


def resolve_claim_devices(
    claim_devices: Iterable[ClaimDevice],
    slices: Mapping[SliceKey, SliceDevice],
    *,
    sample: NodeSample | None = None,
    taken: Iterable[str] = (),
) -> tuple[tuple[DeviceAssignment, ...], tuple[ClaimDevice, ...]]:
    """(assignments, unresolved): each claimed device whose slice entry carries an NVML UUID becomes an assignment
    of that UUID with its claim; the rest come back unresolved, to be held back.

    A MIG device the driver advertises before it exists has no ``uuid`` in its slice entry, only ``parentUUID`` and
    ``profile``; after the claim created it, its slice entry may never be republished with one (dcgm-exporter issue
    #714). Given the ``sample``, such a device is resolved to the MIG device of that profile on that parent GPU when
    exactly one exists that nothing else names (no slice UUID, no device in ``taken``: the device plugin's) and only
    one pending claimed device asks for it; any ambiguity stays unresolved. Several pods on one claim (a shared
    claim) become several assignments of one device: the same sharing domain as time-sliced replicas of a
    device-plugin GPU. The resource is ``<driver>/<type>`` (``gpu.nvidia.com/mig``).
    """
    found: list[tuple[ClaimDevice, str, str]] = []
    unresolved: list[ClaimDevice] = []
    by_shape: dict[tuple[str, str], list[tuple[ClaimDevice, SliceDevice]]] = {}
    for claimed in claim_devices:
        device = slices.get(claimed.slice_key)
        if device is not None and device.uuid:
            found.append((claimed, device.uuid, device.type))
        elif device is not None and sample is not None and device.parent_uuid and device.profile:
            by_shape.setdefault((device.parent_uuid, device.profile), []).append((claimed, device))
        else:
            unresolved.append(claimed)
    if by_shape:
        named = {device.uuid for device in slices.values() if device.uuid} | set(taken)
        gpus = sample.gpus if sample is not None else ()
        for (parent, profile), waiting in by_shape.items():
            candidates = [mig.uuid for gpu in gpus if gpu.uuid == parent and not gpu.lost
                          for mig in gpu.instances if mig.profile == profile and mig.uuid not in named]
            if len(candidates) == 1 and len({claimed.slice_key for claimed, _ in waiting}) == 1:
                found.extend((claimed, candidates[0], device.type) for claimed, device in waiting)
            else:
                unresolved.extend(claimed for claimed, _ in waiting)
    resolved = tuple(DeviceAssignment(
        device_id=uuid, resource=f"{claimed.driver}/{kind or 'device'}", namespace=claimed.namespace,
        pod=claimed.pod, container=claimed.container, claim=claimed.claim) for claimed, uuid, kind in found)
    return resolved, tuple(unresolved)


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

    These are what "unauthorized use" is judged on; the stage (``stage.NodeAttributor``) holds each new pair back
    until a kubelet List that started after it was first seen confirms it (a pod that just got the device is not yet
    in the last List).
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

