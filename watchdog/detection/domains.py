"""Who shares what: the devices and sharing domains of one tick, derived from the sample and the attribution.

Pure (no I/O, no asyncio). Interference only exists between pods that share a resource, and which resource is
shared depends on how the GPU is split: MIG isolates SMs, L2 and DRAM between GPU instances but not the board's
power/thermal budget, clocks or PCIe (arXiv 2508.20274), so every GPU is one *power* domain for
all its instances, and its PCIe link one *pcie* domain for them (judged where NVML gives the link's generation
and width); a GPU not in MIG mode handed to several pods (time-slicing / MPS replicas) shares SMs and DRAM
bandwidth between them (*timeslice*); a GPU instance holding several compute instances shares DRAM and L2 (*gi*).
A pod belongs to a device when the kubelet assigned it (attribution.devices) or one of its processes runs there
(attribution.processes): the latter is how an unauthorized user still counts as an antagonist.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Mapping, Sequence

from watchdog.model import EMPTY, Attribution, GpuSample, MigSample, NodeSample, PodRef, PodUsage, ProcessSample

# Compute slices of an A100/H100/H200 (NVIDIA MIG user guide, "Supported MIG Profiles"); only scales the `share`
# evidence.
MIG_COMPUTE_SLICES = 7
_PROFILE_SLICES = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.")


class DomainKind(StrEnum):
    POWER = "power"
    TIMESLICE = "timeslice"
    GPU_INSTANCE = "gi"
    PCIE = "pcie"


# Device and Domain are built afresh for every device and domain of every tick and never changed after: they are
# plain (not frozen) dataclasses because a frozen dataclass's __init__ costs three times as much, about 0.2 ms a
# tick on a 56-instance node (bench/bench_detection.py). Treat them as immutable.


@dataclass(slots=True)
class Device:
    """One allocatable device: a MIG instance, or a whole GPU when MIG is off."""

    uuid: str
    gpu: GpuSample
    mig: MigSample | None
    assigned: tuple[PodRef, ...]  # what the kubelet says it gave
    pods: tuple[PodRef, ...]  # assigned ∪ owners of processes seen here, assigned first
    processes: tuple[ProcessSample, ...]
    memory_total: int | None
    memory_used: int | None
    memory_reserved: int | None
    pod_memory: Mapping[str, int] = field(default_factory=lambda: EMPTY)  # pod key → bytes
    pod_sm: Mapping[str, float] = field(default_factory=lambda: EMPTY)  # pod key → SM activity 0–1
    pod_dram: Mapping[str, float] = field(default_factory=lambda: EMPTY)  # pod key → memory-controller share 0–1
    unattributed_sm: float | None = None  # SM activity (0–1 of this device) of processes no known pod owns
    compute_instances: tuple[str, ...] = ()  # a GI's memory pool (detection/pools.py): the UUIDs of its CI devices

    @property
    def profile(self) -> str | None:
        return self.mig.profile if self.mig else None

    @property
    def share(self) -> float:
        """Fraction of the GPU's compute this device can use."""
        return 1.0 if self.mig is None else profile_share(self.mig.profile)


@lru_cache(maxsize=256)
def profile_share(profile: str) -> float:
    """Compute slices of a MIG profile ("3g.40gb", or "1c.4g.40gb" for a compute instance) over the GPU's."""
    match = _PROFILE_SLICES.match(profile)
    if not match:
        return 1.0 / MIG_COMPUTE_SLICES
    return min(1.0, int(match.group(1) or match.group(2)) / MIG_COMPUTE_SLICES)


@dataclass(slots=True)
class Domain:
    """A set of pods contending for one resource, with the raw numbers that say how contended it is."""

    key: str
    kind: DomainKind
    resource: str  # "power", "sm", "dram"
    gpu: GpuSample
    pods: tuple[PodRef, ...]
    activity: Mapping[str, float | None]  # pod key → its use, relative to its own share (0–1)
    share: Mapping[str, float]  # pod key → fraction of the domain's capacity it can use
    busy: float | None = None  # timeslice: GPU busy share; gi: DRAM bandwidth use
    clock_loss: float | None = None  # power: 1 − sm_clock / max
    reasons: int | None = None  # power: nvmlClocksEventReason mask
    unattributed: float | None = None  # power: share of the GPU's compute driven by processes of no known pod
    # The activity a pod's *victim signal* is judged on where it differs from the use the culprit search reads:
    # pcie judges victims by their SM activity (starved input) and culprits by their share of the link.
    victim_activity: Mapping[str, float | None] | None = None


def _unique(refs: Sequence[PodRef]) -> tuple[PodRef, ...]:
    if len(refs) < 2:
        return tuple(refs)
    seen: dict[str, PodRef] = {}
    for ref in refs:
        key = ref.key
        if key not in seen:
            seen[key] = ref
    return tuple(seen.values())


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
    assigned = _unique(attribution.devices.get(uuid, ()))
    owners = [user.ref for user in users if user.ref is not None]
    pods = _unique([*assigned, *owners]) if owners else assigned
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


def devices_of(sample: NodeSample, attribution: Attribution) -> list[Device]:
    """Every MIG instance and every non-MIG GPU of the sample; lost GPUs have no devices (Xid scoping falls back
    to the kubelet's assignments for them)."""
    usage = attribution.usage(sample)
    devices: list[Device] = []
    for gpu in sample.gpus:
        if gpu.lost:
            continue
        if gpu.mig_enabled:
            per_gi = Counter(mig.gpu_instance for mig in gpu.instances)
            for mig in gpu.instances:
                devices.append(_device(uuid=mig.uuid, gpu=gpu, mig=mig, processes=mig.processes,
                                       users=usage.get(mig.uuid, ()), attribution=attribution,
                                       pooled=per_gi[mig.gpu_instance] > 1))
        else:
            devices.append(_device(uuid=gpu.uuid, gpu=gpu, mig=None, processes=gpu.processes,
                                   users=usage.get(gpu.uuid, ()), attribution=attribution))
    return devices


def domains_of(devices: list[Device]) -> list[Domain]:
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
                from watchdog.detection.pcie import pcie_domain  # it builds on this module's types

                link = pcie_domain(gpu, members, pods=power.pods, sm_activity=power.activity)
                if link is not None:
                    domains.append(link)
        if not gpu.mig_enabled:
            device = members[0]
            if len(device.pods) >= 2:
                known = list(device.pod_sm.values())
                busy = sum(known) if known else gpu.gpu_util
                domains.append(
                    Domain(
                        key=f"timeslice/{gpu_uuid}",
                        kind=DomainKind.TIMESLICE,
                        resource="sm",
                        gpu=gpu,
                        pods=device.pods,
                        activity={ref.key: device.pod_sm.get(ref.key) for ref in device.pods},
                        share={ref.key: 1.0 for ref in device.pods},
                        busy=busy,
                    )
                )
            continue
        by_gi: dict[int, list[Device]] = {}
        for device in members:
            by_gi.setdefault(device.mig.gpu_instance, []).append(device)  # type: ignore[union-attr]
        for gi, instances in sorted(by_gi.items()):
            if len(instances) < 2:
                continue  # a GI of one compute instance: nothing inside it is shared
            pods = _unique([ref for d in instances for ref in d.pods])
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


def _activity(devices: list[Device], pods: tuple[PodRef, ...]) -> dict[str, float | None]:
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


def _share(devices: list[Device], pods: tuple[PodRef, ...]) -> dict[str, float]:
    share = {ref.key: 0.0 for ref in pods}
    for device in devices:
        part = device.share / max(len(device.pods), 1)
        for ref in device.pods:
            key = ref.key
            share[key] = min(1.0, share[key] + part)
    return share


def _power_domain(gpu: GpuSample, devices: list[Device]) -> Domain | None:
    pods = _unique([ref for d in devices for ref in d.pods])
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
