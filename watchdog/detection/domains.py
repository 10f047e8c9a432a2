"""Who shares what: the devices and sharing domains of one tick, derived from the sample and the attribution.

Pure (no I/O, no asyncio). Interference only exists between pods that share a resource, and which resource is
shared depends on how the GPU is split: MIG isolates SMs, L2 and DRAM between GPU instances but not the board's
power/thermal budget, clocks or PCIe (arXiv 2508.20274), so every GPU is one *power* domain for
all its instances, and its PCIe link one *pcie* domain for them (judged where NVML gives the link's generation
and width); a GPU not in MIG mode handed to several pods (time-slicing replicas, MPS without limits) shares SMs
and DRAM bandwidth between them (*timeslice*); MPS clients under the device plugin's limits have their own slice
of the SMs and share DRAM bandwidth and L2 (*mps*, detection/mps.py); a GPU instance holding several compute
instances shares DRAM and L2 (*gi*). On a vGPU host each VM's vGPU is a device of its launcher pod, and
time-sliced vGPUs under the best-effort scheduler share SM time (*vgpu*, detection/vgpu.py).
A pod belongs to a device when the kubelet assigned it (attribution.devices) or one of its processes runs there
(attribution.processes): the latter is how an unauthorized user still counts as an antagonist.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Sequence

from watchdog.detection.domain_types import Device, Domain, DomainKind, unique_refs
from watchdog.detection.mps import mps_domain, mps_limits
from watchdog.detection.pcie import pcie_domain
from watchdog.detection.trust import ambiguous_uuids
from watchdog.detection.vgpu import held_gpu_instances, time_sliced_shares, vgpu_devices, vgpu_domain
from watchdog.model import Attribution, GpuSample, MigSample, NodeSample, PodRef, PodUsage, ProcessSample

# The types live in domain_types (pcie.py builds on them too); named here as well for the callers that read a
# tick's devices and domains from this module.
__all__ = ["Device", "Domain", "DomainKind", "devices_of", "domains_of"]


def _by_pod(users: tuple[PodUsage, ...], attr: str) -> dict[str, float]:
    """One pod's measured use of a device, its containers' sums (Attribution.usage) added up."""
    totals: dict[str, float] = {}
    for user in users:
        value = getattr(user, attr)
        if user.ref is not None and value is not None:
            key = user.ref.key
            totals[key] = totals.get(key, 0) + value
    return totals


def _device(
    *,
    uuid: str,
    gpu: GpuSample,
    mig: MigSample | None,
    processes: tuple[ProcessSample, ...],
    users: tuple[PodUsage, ...],
    attribution: Attribution,
    pooled: bool = False,
) -> Device:
    assigned = unique_refs(attribution.devices.get(uuid, ()))
    owners = [user.ref for user in users if user.ref is not None]
    pods = unique_refs([*assigned, *owners]) if owners else assigned
    source = mig if mig is not None else gpu
    memory = {k: int(v) for k, v in _by_pod(users, "memory_bytes").items()}
    if not memory and len(pods) == 1 and source.memory_used_bytes is not None and not pooled:
        # Exclusive device, no per-process numbers. Not a CI of a split GI: its memory is the GI's (pools.py).
        memory = {pods[0].key: source.memory_used_bytes}
    if mig is not None:
        # GPM gives SM activity per compute instance only: every pod on it gets the instance's number.
        sm = {ref.key: mig.sm_util for ref in pods} if mig.sm_util is not None else {}
    else:
        sm = _by_pod(users, "sm_util")
        whole = gpu.sm_util if gpu.sm_util is not None else gpu.gpu_util
        if not sm and len(pods) == 1 and whole is not None:
            sm = {pods[0].key: whole}
    if mig is not None:
        # An instance nobody was given but that computes (a host process, a pod the cache does not know yet).
        unattributed = mig.sm_util if not pods else None
    else:
        unattributed = next((user.sm_util for user in users if user.ref is None), None)
    return Device(
        uuid=uuid,
        gpu=gpu,
        mig=mig,
        assigned=assigned,
        pods=pods,
        processes=processes,
        memory_total=source.memory_total_bytes,
        memory_used=source.memory_used_bytes,
        memory_reserved=source.memory_reserved_bytes,
        pod_memory=memory,
        pod_sm=sm,
        pod_dram=_by_pod(users, "memory_util") if mig is None else {},
        unattributed_sm=unattributed,
    )


def devices_of(
    sample: NodeSample, attribution: Attribution, *, leave_out: frozenset[str] | None = None
) -> list[Device]:
    """Every MIG instance and every non-MIG GPU of the sample; lost GPUs have no devices (Xid scoping falls back
    to the kubelet's assignments for them). A UUID in ``leave_out`` has no device, nor has a GPU's instances; by
    default that is every UUID two devices of the sample claim, which names neither (detection/trust.py)."""
    usage = attribution.usage(sample)
    ambiguous = ambiguous_uuids(sample) if leave_out is None else leave_out
    devices: list[Device] = []
    for gpu in sample.gpus:
        if gpu.lost or gpu.uuid in ambiguous:
            continue
        if gpu.mig_enabled:
            held = held_gpu_instances(gpu) if gpu.vgpus else frozenset()
            per_gi = Counter(mig.gpu_instance for mig in gpu.instances)
            for mig in gpu.instances:
                if mig.uuid in ambiguous or (held and mig.gpu_instance in held):
                    continue  # a MIG-backed vGPU's GI is that vGPU's device (vgpu.py), never counted twice
                devices.append(_device(uuid=mig.uuid, gpu=gpu, mig=mig, processes=mig.processes,
                                       users=usage.get(mig.uuid, ()), attribution=attribution,
                                       pooled=per_gi[mig.gpu_instance] > 1))
        else:
            device = _device(uuid=gpu.uuid, gpu=gpu, mig=None, processes=gpu.processes,
                             users=usage.get(gpu.uuid, ()), attribution=attribution)
            if attribution.sharing:
                device.mps = mps_limits(gpu, gpu.processes, attribution)
            devices.append(device)
        if gpu.vgpus:
            devices.extend(vgpu_devices(gpu, attribution, leave_out=ambiguous))
    return devices


def domains_of(devices: Sequence[Device]) -> list[Domain]:
    """The sharing domains with at least two pods, in a stable order."""
    by_gpu: dict[str, list[Device]] = {}
    for device in devices:
        by_gpu.setdefault(device.gpu.uuid, []).append(device)
    domains: list[Domain] = []
    for gpu_uuid, members in by_gpu.items():
        gpu = members[0].gpu
        power = _power_domain(gpu, members)
        if power is not None:
            domains.append(power)
            if gpu.mig_enabled:
                link = pcie_domain(gpu, members, pods=power.pods, sm_activity=power.activity)
                if link is not None:
                    domains.append(link)
        if gpu.vgpus and not gpu.mig_enabled:
            vgpu = vgpu_domain(gpu, members, busy=timeslice_busy(gpu, time_sliced_shares(gpu)))
            if vgpu is not None:
                domains.append(vgpu)
        if not gpu.mig_enabled:
            device = members[0]
            if device.mps is not None:
                mps = mps_domain(device)  # SMs split by the plugin's limits: only DRAM bandwidth is shared
                if mps is not None:
                    domains.append(mps)
            elif len(device.pods) >= 2:
                domains.append(
                    Domain(
                        key=f"timeslice/{gpu_uuid}",
                        kind=DomainKind.TIMESLICE,
                        resource="sm",
                        gpu=gpu,
                        pods=device.pods,
                        activity={ref.key: device.pod_sm.get(ref.key) for ref in device.pods},
                        share={ref.key: 1.0 for ref in device.pods},
                        busy=timeslice_busy(gpu, device.pod_sm.values()),
                    )
                )
            continue
        by_gi: dict[int, list[Device]] = {}
        for device in members:
            if device.mig is not None:  # a whole GPU cannot sit in a MIG GPU's group; never assume it
                by_gi.setdefault(device.mig.gpu_instance, []).append(device)
        for gi, instances in sorted(by_gi.items()):
            if len(instances) < 2:
                continue  # a GI of one compute instance: nothing inside it is shared
            pods = unique_refs([ref for d in instances for ref in d.pods])
            if len(pods) < 2:
                continue
            dram = [d.mig.dram_bw_util for d in instances if d.mig.dram_bw_util is not None]  # type: ignore[union-attr]
            domains.append(
                Domain(
                    key=f"gi/{gpu_uuid}/{gi}",
                    kind=DomainKind.GPU_INSTANCE,
                    resource="dram",
                    gpu=gpu,
                    pods=pods,
                    activity=_activity(instances, pods),
                    share=_share(instances, pods),
                    busy=max(dram) if dram else None,
                )
            )
    return domains


def timeslice_busy(gpu: GpuSample, shares: Iterable[float]) -> float | None:
    """How busy a time-sliced GPU is by its own account: utilization.gpu, or the processes' SM shares plus the time
    the engine spent switching between them (GPM GR0_CTXSW_ACTIVE_PCT) where the driver has it, whichever is higher.

    Not the shares alone: switching between contexts costs time no process gets, so with three busy contexts the
    shares sum visibly below 1 while the GPU has no idle time at all. Only a trace that carries neither reading is
    judged on the shares' sum (None when it has no shares either).
    """
    known = list(shares)
    counted = sum(known) + (gpu.ctxsw_active or 0.0) if known else None
    readings = [reading for reading in (gpu.gpu_util, counted) if reading is not None]
    return min(1.0, max(readings)) if readings else None


def _activity(devices: Sequence[Device], pods: tuple[PodRef, ...]) -> dict[str, float | None]:
    """A pod's SM activity across its devices, weighted by each device's share; None when nothing is known."""
    weighted: dict[str, float] = {}
    total: dict[str, float] = {}
    for device in devices:
        share = device.share
        for key, value in device.pod_sm.items():
            weighted[key] = weighted.get(key, 0.0) + value * share
            total[key] = total.get(key, 0.0) + share
    result: dict[str, float | None] = {}
    for ref in pods:
        key = ref.key
        result[key] = weighted[key] / total[key] if total.get(key) else None
    return result


def _share(devices: Sequence[Device], pods: tuple[PodRef, ...]) -> dict[str, float]:
    share = {ref.key: 0.0 for ref in pods}
    for device in devices:
        part = device.share / max(len(device.pods), 1)
        for ref in device.pods:
            key = ref.key
            share[key] = min(1.0, share[key] + part)
    return share


def _power_domain(gpu: GpuSample, devices: Sequence[Device]) -> Domain | None:
    pods = unique_refs([ref for d in devices for ref in d.pods])
    if len(pods) < 2:
        return None
    loss = None
    if gpu.sm_clock_mhz is not None and gpu.sm_clock_max_mhz:
        loss = max(0.0, min(1.0, 1.0 - gpu.sm_clock_mhz / gpu.sm_clock_max_mhz))
    share = _share(devices, pods) if gpu.mig_enabled else {ref.key: 1.0 for ref in pods}
    unowned = [d.unattributed_sm * d.share for d in devices if d.unattributed_sm is not None]
    return Domain(
        key=f"gpu/{gpu.uuid}/power",
        kind=DomainKind.POWER,
        resource="power",
        gpu=gpu,
        pods=pods,
        activity=_activity(devices, pods),
        share=share,
        clock_loss=loss,
        reasons=gpu.clock_event_reasons,
        unattributed=sum(unowned) if unowned else None,
    )
