"""The shapes every detector reads: a device, a sharing domain and its kind, built once per tick by domains.py.

Pure (no I/O). They live apart from the code that builds them so that every builder (domains.py for the power,
time-slice and GPU-instance domains, pcie.py for the PCIe link, mps.py and vgpu.py for theirs) and every reader
imports them from one place, downward, and no module imports its own importer. docs/detection.md says what each kind of domain shares.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from typing import Mapping, Sequence

from watchdog.model import EMPTY, DeviceSharing, GpuSample, MigSample, PodRef, ProcessSample, VgpuSample

# Compute slices of an A100/H100/H200 (NVIDIA MIG user guide, "Supported MIG Profiles"); only scales the `share`
# evidence.
MIG_COMPUTE_SLICES = 7
_PROFILE_SLICES = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.")
# A MIG-backed vGPU type is named <board>-<compute slices>-<framebuffer GB>C, e.g. "GRID A100-3-20C" (NVIDIA Virtual GPU
# Software User Guide, "MIG-Backed vGPU Types"); a time-sliced one has no slice count ("GRID A100-4C").
_VGPU_TYPE_SLICES = re.compile(r"-([1-7])-\d+[A-Z]$")


class DomainKind(StrEnum):
    POWER = "power"
    TIMESLICE = "timeslice"
    GPU_INSTANCE = "gi"
    PCIE = "pcie"
    MPS = "mps"  # MPS clients under the device plugin's limits: SMs split, DRAM bandwidth and L2 shared
    VGPU = "vgpu"  # VMs' time-sliced vGPUs under the best-effort vGPU scheduler (detection/vgpu.py)


# The kinds whose members take turns on the SMs, judged alike: a pod's share taken while the GPU is busy, the
# fair-share rule, the scheduler model (detection/scheduler_model.py).
TIME_SLICED = frozenset({DomainKind.TIMESLICE, DomainKind.VGPU})


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
    mps: DeviceSharing | None = None  # a whole GPU whose pods are MPS clients under the plugin's limits (mps.py)
    vgpu: VgpuSample | None = None  # a VM's vGPU on a vGPU host GPU (detection/vgpu.py); then mig is None
    vgpu_gi: MigSample | None = None  # a MIG-backed vGPU's GPU instance as a MIG device of the sample, if listed

    @property
    def profile(self) -> str | None:
        return self.mig.profile if self.mig else None

    @property
    def share(self) -> float:
        """Fraction of the GPU's compute this device can use."""
        if self.mig is not None:
            return profile_share(self.mig.profile)
        if self.vgpu is None or self.vgpu.gpu_instance is None:
            return 1.0  # a whole GPU, or a time-sliced vGPU: its SM share is of the whole GPU's time
        if self.vgpu_gi is not None:
            return profile_share(self.vgpu_gi.profile)
        return vgpu_type_share(self.vgpu.type_name)


@lru_cache(maxsize=256)
def profile_share(profile: str) -> float:
    """Compute slices of a MIG profile ("3g.40gb", or "1c.4g.40gb" for a compute instance) over the GPU's."""
    match = _PROFILE_SLICES.match(profile)
    if not match:
        return 1.0 / MIG_COMPUTE_SLICES
    return min(1.0, int(match.group(1) or match.group(2)) / MIG_COMPUTE_SLICES)


@lru_cache(maxsize=64)
def vgpu_type_share(type_name: str) -> float:
    """Compute slices of a MIG-backed vGPU type ("GRID A100-3-20C" → 3/7); one slice when the name does not say."""
    match = _VGPU_TYPE_SLICES.search(type_name)
    return int(match.group(1)) / MIG_COMPUTE_SLICES if match else 1.0 / MIG_COMPUTE_SLICES


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
    busy: float | None = None  # timeslice: GPU busy share; gi, mps: DRAM bandwidth use
    clock_loss: float | None = None  # power: 1 − sm_clock / max
    reasons: int | None = None  # power: nvmlClocksEventReason mask
    unattributed: float | None = None  # power: share of the GPU's compute driven by processes of no known pod
    # The activity a pod's *victim signal* is judged on where it differs from the use the culprit search reads:
    # pcie judges victims by their SM activity (starved input) and culprits by their share of the link.
    victim_activity: Mapping[str, float | None] | None = None


def unique_refs(refs: Sequence[PodRef]) -> tuple[PodRef, ...]:
    """``refs`` without repeats (by pod key), first occurrence kept, in order."""
    if len(refs) < 2:
        return tuple(refs)
    seen: dict[str, PodRef] = {}
    for ref in refs:
        key = ref.key
        if key not in seen:
            seen[key] = ref
    return tuple(seen.values())
