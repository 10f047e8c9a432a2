"""Which devices of a tick detection may reason about: none in quarantine, none whose identity is ambiguous.

Pure (no I/O). Every finding blames or protects a pod *through a device UUID*: the kubelet's assignments, the
processes NVML lists and the Xid events all meet on it. The plausibility gate quarantines a GPU or MIG device
whose readings no GPU can produce (``NodeSample.quarantined``) and drops duplicated UUIDs before detection runs;
detection still checks identity itself rather than rely on that. Two devices claiming one UUID would hand the
kubelet's assignment of one to the processes of the other (a pod then "runs on a device it was never given"), so
a UUID two devices claim names neither, and both are left out, as a quarantined one is.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from watchdog.model import GpuSample, NodeSample, XidEvent


def ambiguous_uuids(sample: NodeSample) -> frozenset[str]:
    """The GPU and MIG UUIDs that more than one device of ``sample`` claims (one name space: a GPU and a MIG
    device sharing a UUID are ambiguous too)."""
    uuids = [gpu.uuid for gpu in sample.gpus]
    uuids += [mig.uuid for gpu in sample.gpus for mig in gpu.instances]
    if len(set(uuids)) == len(uuids):  # every tick of a sane node: one set, no counting
        return frozenset()
    return frozenset(uuid for uuid, count in Counter(uuids).items() if count > 1)


def trusted(sample: NodeSample) -> tuple[NodeSample, frozenset[str]]:
    """``sample`` without the devices detection must not reason about, and their UUIDs.

    A quarantined or ambiguous GPU goes with everything on it: its MIG instances, its processes and its Xid events
    (by UUID, or by index for an event that names none). A quarantined or ambiguous MIG device goes with its
    processes; its GPU stays. ``sample`` itself comes back when nothing in it is left out.
    """
    excluded = sample.quarantined | ambiguous_uuids(sample)
    if not excluded:
        return sample, excluded
    gpus: list[GpuSample] = []
    gone: set[int] = set()  # indexes of the GPUs left out
    changed = False
    for gpu in sample.gpus:
        if gpu.uuid in excluded:
            gone.add(gpu.index)
            changed = True
            continue
        if any(mig.uuid in excluded for mig in gpu.instances):
            gpu = dataclasses.replace(gpu, instances=tuple(m for m in gpu.instances if m.uuid not in excluded))
            changed = True
        gpus.append(gpu)
    xids = tuple(event for event in sample.xids if not _on(event, excluded, gone))
    if not changed and len(xids) == len(sample.xids):
        return sample, excluded
    return dataclasses.replace(sample, gpus=tuple(gpus), xids=xids), excluded


def _on(event: XidEvent, excluded: frozenset[str], gone: set[int]) -> bool:
    """Whether an Xid event is about a GPU left out."""
    return event.gpu_uuid in excluded if event.gpu_uuid else event.gpu_index in gone
