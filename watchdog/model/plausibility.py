"""The plausibility gate: a reading no GPU can produce never reaches detection.

An eviction is only as right as the reading behind it, and NVML in a bad state, a simulator bug or a hand-edited
trace can all produce values no GPU can have: more memory used than exists, two devices with one UUID, a MIG
device under a GPU that is not there, −2731 °C. This gate is the one place such readings are refused, used alike
where readings enter live (the sampler) and offline (the trace reader), so a replay refuses exactly what the
agent refused. A refused reading is dropped (a scalar becomes None; an impossible identity removes the device or
the event), recorded as a :class:`Rejection` with its reason, and its device is quarantined: detection neither
blames nor protects a pod through it until it has read plausibly for ``quarantine_ticks`` consecutive ticks.
A GPU's quarantine covers its MIG devices (they are read through it); a MIG device's does not cover its GPU.

Pure: no I/O, no logging, no clock. The state kept across ticks is the MIG layout of the current enumeration and
the quarantine counters. Every check and the physical reason for its bounds is in docs/detection.md
("Plausibility gate").
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from watchdog.model.plausibility_checks import (
    MAX_COMPUTE_INSTANCE_ID,
    MAX_GPU_INDEX,
    MAX_GPU_INSTANCE_ID,
    MIG_CONFIG_CHANGE,
    Found,
    check_gpu,
    check_xid,
)
from watchdog.model.samples import GpuSample, MigSample, NodeSample, XidEvent

__all__ = ["CHECKS", "DEFAULT_QUARANTINE_TICKS", "PlausibilityGate"]

DEFAULT_QUARANTINE_TICKS = 10
"""Consecutive plausible ticks a device must read before detection judges it again (10 s at the default 1 s
tick): a device that produced an impossible value once is not trusted on the very next reading."""

CHECKS = ("identity", "continuity", "memory", "ratio", "clock", "power", "temperature", "pcie", "context_switch",
          "xid")
"""Every ``check`` a Rejection can name: the ``check`` label values of ``gpu_watchdog_readings_rejected_total``."""

_Identity = tuple[str, int, int, str]  # (GPU UUID, GPU instance, compute instance, profile) of one MIG device
_NONE_REPEATED: Counter = Counter()  # shared and only ever read
_ALL = "*"  # a MIG-config-change event that names no known GPU re-opens every GPU's layout


class PlausibilityGate:
    """Admits one NodeSample per tick; see the module docstring.

    ``admit`` is called once per tick, ticks increasing. A second call for the tick it last admitted (the same
    sample with the tick's Xid events merged in, or its own output) replaces the first: the state goes back to
    where it stood before that tick, so nothing is counted twice. A sample that already carries ``rejected`` and
    ``quarantined`` (a recorded trace) keeps them: its rejected devices count as implausible this tick, and its
    quarantined ones stay quarantined, so re-gating a recording reproduces what the agent did.
    """

    def __init__(self, *, quarantine_ticks: int = DEFAULT_QUARANTINE_TICKS) -> None:
        if isinstance(quarantine_ticks, bool) or not isinstance(quarantine_ticks, int) or quarantine_ticks < 0:
            raise ValueError(f"quarantine_ticks: must be an integer >= 0, got {quarantine_ticks!r}")
        self.quarantine_ticks = quarantine_ticks
        self._generation: int | None = None
        self._layouts: dict[str, dict[str, _Identity]] = {}  # GPU UUID → its MIG devices, once established
        self._reopen: frozenset[str] = frozenset()  # GPUs whose layout may still change (MIG-config event)
        self._quarantine: dict[str, int] = {}  # device UUID → clean ticks it still has to read
        self._tick: int | None = None
        self._before: tuple[Any, ...] = ()

    def admit(self, sample: NodeSample) -> NodeSample:
        if sample.tick == self._tick:
            self._generation, self._layouts, self._reopen, self._quarantine = self._before
        else:
            self._tick = sample.tick
        self._before = (self._generation, dict(self._layouts), self._reopen, dict(self._quarantine))
        found = Found()
        removed_instances: set[str] = set()
        gpus, uuids = self._identity(sample.gpus, found, removed_instances)
        self._open_layouts(sample)
        kept = []
        for gpu in gpus:
            instances, clean = self._instances(gpu, uuids, found)
            kept.append(check_gpu(gpu, instances, found))
            if clean and not gpu.lost and gpu.mig_enabled and gpu.uuid:
                if gpu.uuid not in self._layouts:  # established on its first tick with every identity sound
                    self._layouts[gpu.uuid] = {mig.uuid: _layout_key(gpu, mig) for mig in instances}
            elif gpu.lost or not gpu.mig_enabled:
                self._layouts.pop(gpu.uuid, None)  # re-enumerated when it answers again / enables MIG
        present = {(gpu.index, gpu.uuid) for gpu in kept}
        xids = tuple(event for event in sample.xids if check_xid(event, present, found))
        return self._finish(sample, tuple(kept), xids, found, removed_instances)

    # -------------------------------------------------------------------------------------------- identity

    @staticmethod
    def _identity(gpus: tuple[GpuSample, ...], found: Found, removed: set[str]) -> tuple[list[GpuSample], Counter]:
        """The GPUs whose UUID and index are their own (a duplicated one is removed with every bearer), and the
        UUIDs more than one device of the sample bears (with their counts)."""
        names = [gpu.uuid for gpu in gpus if gpu.uuid]
        names += [mig.uuid for gpu in gpus for mig in gpu.instances if mig.uuid]
        uuids = _repeated(names)
        indices = _repeated([gpu.index for gpu in gpus])
        kept = []
        for gpu in gpus:
            if gpu.uuid in uuids:
                found.add("identity", gpu.uuid, "uuid", gpu.uuid, f"{uuids[gpu.uuid]} devices report this UUID")
            elif gpu.index in indices or not 0 <= gpu.index <= MAX_GPU_INDEX:
                reason = f"NVML indices are 0 … count − 1 (at most {MAX_GPU_INDEX}), one per GPU"
                found.add("identity", gpu.uuid, "index", gpu.index, reason)
            else:
                kept.append(gpu)
                continue
            removed.update(mig.uuid for mig in gpu.instances if mig.uuid)
        return kept, uuids

    def _instances(self, gpu: GpuSample, uuids: Counter, found: Found) -> tuple[tuple[MigSample, ...], bool]:
        """The GPU's MIG devices that may be judged (``gpu.instances`` itself when all may); False when one was
        removed for its identity."""
        instances = gpu.instances
        if not instances:
            return instances, True
        layout = self._layouts.get(gpu.uuid)
        index, parent = gpu.index, gpu.uuid
        if layout is not None and len(layout) == len(instances):
            # Every device where the established layout has it: that layout's ids were checked when it was
            # established (in range, one device per GI/CI pair), so only the UUIDs and the parent index are new.
            for mig in instances:
                if (mig.uuid in uuids or mig.gpu_index != index
                        or layout.get(mig.uuid) != (parent, mig.gpu_instance, mig.compute_instance, mig.profile)):
                    break
            else:
                return instances, True
        pairs = _repeated([(mig.gpu_instance, mig.compute_instance) for mig in instances])
        kept, clean = [], True
        for mig in instances:
            gi, ci = mig.gpu_instance, mig.compute_instance
            if (mig.uuid in uuids or mig.gpu_index != index or not 0 <= gi <= MAX_GPU_INSTANCE_ID
                    or not 0 <= ci <= MAX_COMPUTE_INSTANCE_ID or (gi, ci) in pairs):
                found.add("identity", mig.uuid, *_mig_identity(gpu, mig, uuids))
                clean = False
                continue
            if layout is not None and layout.get(mig.uuid) != (parent, gi, ci, mig.profile):
                reason = ("appeared" if mig.uuid not in layout else "changed GPU instance, compute instance or "
                          "profile") + " without a re-enumeration or MIG-config-change event"
                found.add("continuity", mig.uuid, "uuid", mig.uuid, reason)
                continue
            kept.append(mig)
        return (instances if len(kept) == len(instances) else tuple(kept)), clean

    # ------------------------------------------------------------------------------------------ continuity

    def _open_layouts(self, sample: NodeSample) -> None:
        """Forget the layouts that may change this tick: all at a new enumeration; a GPU's at a MIG-config-change
        event for it and on the tick after (the sampler re-enumerates at the next tick)."""
        if sample.layout_generation != self._generation:
            self._generation = sample.layout_generation
            self._layouts = {}
        changed = {(event.gpu_uuid if event.gpu_uuid and event.gpu_index >= 0 else _ALL)
                   for event in sample.xids if event.event_type & MIG_CONFIG_CHANGE}
        opened = changed | self._reopen
        if _ALL in opened:
            self._layouts = {}
        else:
            for uuid in opened:
                self._layouts.pop(uuid, None)
        self._reopen = frozenset(changed)

    # ------------------------------------------------------------------------------------------ quarantine

    def _finish(self, sample: NodeSample, gpus: tuple[GpuSample, ...], xids: tuple[XidEvent, ...], found: Found,
                removed: set[str]) -> NodeSample:
        rejected = list(sample.rejected)
        seen = set(rejected)
        rejected.extend(r for r in found.rejections if r not in seen)
        bad = {r.device for r in rejected if r.device}
        quarantine = self._quarantine
        held = set(sample.quarantined) | removed | bad
        for uuid in bad:
            if self.quarantine_ticks:
                quarantine[uuid] = self.quarantine_ticks
            else:
                quarantine.pop(uuid, None)
        for uuid, left in list(quarantine.items()):
            if uuid in bad:
                continue
            held.add(uuid)
            if left <= 1:
                del quarantine[uuid]
            else:
                quarantine[uuid] = left - 1
        for gpu in gpus:
            if gpu.uuid in held:
                held.update(mig.uuid for mig in gpu.instances)
        held.discard("")
        quarantined = frozenset(held)
        if (gpus == sample.gpus and xids == sample.xids and len(rejected) == len(sample.rejected)
                and quarantined == sample.quarantined):
            return sample
        return dataclasses.replace(sample, gpus=gpus, xids=xids, rejected=tuple(rejected), quarantined=quarantined)


def _layout_key(gpu: GpuSample, mig: MigSample) -> _Identity:
    return (gpu.uuid, mig.gpu_instance, mig.compute_instance, mig.profile)


def _mig_identity(gpu: GpuSample, mig: MigSample, uuids: Counter) -> tuple[str, Any, str]:
    """Why a MIG device's identity is impossible (called once its identity failed a check)."""
    if mig.uuid in uuids:
        return "uuid", mig.uuid, f"{uuids[mig.uuid]} devices report this UUID"
    if mig.gpu_index != gpu.index:
        return "gpu_index", mig.gpu_index, f"the MIG device is listed under GPU {gpu.index}"  # a bounded index
    if not 0 <= mig.gpu_instance <= MAX_GPU_INSTANCE_ID:
        return "gpu_instance", mig.gpu_instance, f"GPU instance ids are 0 … {MAX_GPU_INSTANCE_ID}"
    if not 0 <= mig.compute_instance <= MAX_COMPUTE_INSTANCE_ID:
        return "compute_instance", mig.compute_instance, f"compute instance ids are 0 … {MAX_COMPUTE_INSTANCE_ID}"
    value = f"{mig.gpu_instance}/{mig.compute_instance}"
    return "gpu_instance", value, "two MIG devices of one GPU name the same GPU/compute instance pair"


def _repeated(values: list) -> Counter:
    """The values that occur more than once, with their counts (empty, and cheap, when all are distinct)."""
    if len(set(values)) == len(values):
        return _NONE_REPEATED
    return Counter({value: n for value, n in Counter(values).items() if n > 1})
