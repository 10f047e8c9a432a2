"""Memory pools: a GPU instance split into compute instances is one pool of memory, however many devices it shows.

Pure (no I/O). MIG lets a GPU instance be split into compute instances (``nvidia-smi mig -cci``), each its own MIG
device with its own UUID that the device plugin can hand to a different pod; the CIs of a GI share its memory, DRAM
bandwidth and L2. NVML's memory info on every CI handle reports the *GI's* memory (nvml.h, nvmlDeviceGetMemoryInfo
on a MIG device handle; DCGM reads GI memory the same way), so judging memory per CI device would see one full
pool once per CI, blame the pods of one CI for the memory of another and count a tenant's bytes twice.

``memory_pools`` therefore merges the CI devices of every GI that has several into one pooled ``Device`` (its
``compute_instances`` name the members) and passes every other device through unchanged: memory pressure, its
culprit and victims, and the "instance nearly full" warning are judged once per pool. A pod's bytes in the pool
are its processes' bytes, each PID counted once even if a driver listed it on more than one CI handle.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Sequence

from watchdog.detection.domain_types import Device, unique_refs
from watchdog.model import Attribution


def shared_gpu_instances(devices: Sequence[Device]) -> set[tuple[str, int]]:
    """(GPU UUID, GI id) of every GPU instance with two or more compute-instance devices."""
    counts = Counter((d.gpu.uuid, d.mig.gpu_instance) for d in devices if d.mig is not None)
    return {key for key, count in counts.items() if count > 1}


def gi_profile(profile: str) -> str:
    """The GPU instance's profile of a compute instance's: "2c.4g.40gb" → "4g.40gb" (NVML's naming)."""
    head, _, rest = profile.partition(".")
    return rest if head.endswith("c") and rest else profile


def pool_key(gpu_uuid: str, gpu_instance: int) -> str:
    return f"gi/{gpu_uuid}/{gpu_instance}"


def memory_pools(devices: Sequence[Device], attribution: Attribution) -> Sequence[Device]:
    """The devices with the CIs of each shared GI merged into one pool, in the order of each pool's first CI."""
    shared = shared_gpu_instances(devices)
    if not shared:
        return devices
    members: dict[tuple[str, int], list[Device]] = {}
    result: list[Device | tuple[str, int]] = []
    for device in devices:
        key = (device.gpu.uuid, device.mig.gpu_instance) if device.mig is not None else None
        if key in shared:
            if key not in members:
                result.append(key)  # type: ignore[arg-type]
            members.setdefault(key, []).append(device)  # type: ignore[arg-type]
        else:
            result.append(device)
    return [item if isinstance(item, Device) else _pool(members[item], attribution) for item in result]


def _pool(cis: list[Device], attribution: Attribution) -> Device:
    first = cis[0]
    assert first.mig is not None
    processes = tuple({p.pid: p for ci in cis for p in ci.processes}.values())
    pods = unique_refs([ref for ci in cis for ref in ci.pods])
    used = next((ci.memory_used for ci in cis if ci.memory_used is not None), None)
    memory = _pod_bytes(cis, processes, attribution)
    if not memory and len(pods) == 1 and used is not None:
        memory = {pods[0].key: used}  # the GI's only pod, no per-process numbers: the pool is all its own
    uuid = pool_key(first.gpu.uuid, first.mig.gpu_instance)
    return dataclasses.replace(
        first,
        uuid=uuid,
        mig=dataclasses.replace(first.mig, uuid=uuid, profile=gi_profile(first.mig.profile), processes=processes),
        assigned=unique_refs([ref for ci in cis for ref in ci.assigned]),
        pods=pods,
        processes=processes,
        memory_used=used,
        pod_memory=memory,
        pod_sm={},
        pod_dram={},
        unattributed_sm=None,
        compute_instances=tuple(ci.uuid for ci in cis),
    )


def _pod_bytes(cis: list[Device], processes: tuple, attribution: Attribution) -> dict[str, int]:
    """Each pod's bytes in the pool, from its processes (each PID once); the members' sums when a process's
    bytes are unknown (then no PID can be told apart from another anyway)."""
    if processes and all(p.used_memory_bytes is not None for p in processes):
        totals: dict[str, int] = {}
        for process in processes:
            ref = attribution.processes.get(process.pid)
            if ref is not None:
                totals[ref.key] = totals.get(ref.key, 0) + process.used_memory_bytes
        return totals
    totals = {}
    for ci in cis:
        for key, value in ci.pod_memory.items():
            totals[key] = totals.get(key, 0) + value
    return totals
