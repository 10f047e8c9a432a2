"""The agent's `/api/v1/devices` document: the node's GPUs and MIG devices as the last sample saw them, and whose.

`gpu-watchdog inventory` answers "what is on this node and whose is it" for an operator who is not on the node: the
agent already holds the answer (its last NodeSample and the Attribution that joined the kubelet's assignments and
/proc to pods), so the command asks it rather than opening NVML itself. One item per MIG device, or per GPU not in
MIG mode (a lost MIG GPU has no devices to list), with its memory, its processes (by the NVML lists that reported
each, and the pod each belongs to) and the pods the kubelet or a DRA claim assigned it to. ``holders`` is null when
no attribution was made, which is different from an empty list (nobody holds it). The same function words a
sample the CLI took itself (inventory's NVML fallback), so both answers have one shape. Nothing here calls out.
"""

from __future__ import annotations

from typing import Any

from watchdog.model import Attribution, NodeSample, PodRef, ProcessSample, Snapshot

API_VERSION = "gpu-watchdog.io/v1"


def _pod(ref: PodRef | None) -> dict[str, str] | None:
    return None if ref is None else {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid}


def _process(process: ProcessSample, attribution: Attribution | None) -> dict[str, Any]:
    owner = attribution.processes.get(process.pid) if attribution is not None else None
    return {"pid": process.pid, "mode": process.mode, "usedMemoryBytes": process.used_memory_bytes,
            "pod": _pod(owner)}


def _holders(attribution: Attribution | None, uuid: str) -> list[dict[str, str]] | None:
    if attribution is None:
        return None
    return [_pod(ref) for ref in attribution.devices.get(uuid, ())]


def device_items(sample: NodeSample, attribution: Attribution | None = None) -> list[dict[str, Any]]:
    """One item per MIG device, or per GPU not in MIG mode, in NVML index order."""
    items = []
    for gpu in sample.gpus:
        base = {"gpu": gpu.index, "gpuUuid": gpu.uuid, "model": gpu.name, "mig": gpu.mig_enabled, "lost": gpu.lost}
        if not gpu.mig_enabled:
            items.append({**base, "gpuInstance": None, "computeInstance": None, "profile": "", "uuid": gpu.uuid,
                          "memoryTotalBytes": gpu.memory_total_bytes, "memoryUsedBytes": gpu.memory_used_bytes,
                          "processes": [_process(p, attribution) for p in gpu.processes],
                          "holders": _holders(attribution, gpu.uuid)})
            continue
        for mig in gpu.instances:
            items.append({**base, "gpuInstance": mig.gpu_instance, "computeInstance": mig.compute_instance,
                          "profile": mig.profile, "uuid": mig.uuid, "memoryTotalBytes": mig.memory_total_bytes,
                          "memoryUsedBytes": mig.memory_used_bytes,
                          "processes": [_process(p, attribution) for p in mig.processes],
                          "holders": _holders(attribution, mig.uuid)})
    return items


def devices_document(snapshot: Snapshot | None) -> dict[str, Any]:
    """The DeviceList of the latest sample; no items before the first one."""
    sample = snapshot.sample if snapshot is not None else None
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceList",
        "node": snapshot.node if snapshot is not None else "",
        "tick": sample.tick if sample is not None else None,
        "timestamp": sample.timestamp if sample is not None else None,
        "driverVersion": sample.driver_version if sample is not None else None,
        "items": device_items(sample, snapshot.attribution) if sample is not None else [],
    }
