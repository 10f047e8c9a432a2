"""Which GPUs the device plugin shares, in how many replicas, and whether the replicas are MPS clients.

Three sources say it, none of them alone enough. The kubelet counts the replicas: with the NVIDIA k8s-device-plugin's
``sharing.timeSlicing`` or ``sharing.mps`` a GPU is advertised as ``<uuid>::0`` … ``<uuid>::<n-1>``
(k8s-device-plugin internal/rm), so ``GetAllocatableResources`` lists every replica of every GPU, assigned or not.
Only the node says which of the two modes it is: GPU Feature Discovery labels it ``nvidia.com/gpu.sharing-strategy``
(none | time-slicing | mps) and ``nvidia.com/gpu.replicas`` (k8s-device-plugin README, "Shared Access to GPUs").
A node without GFD can state both in the settings (``attribution.sharing``).

The rule, per whole GPU (not in MIG mode) of the tick's sample: replicas from the kubelet's count when it has one for
the GPU (it is what the plugin advertises, so it beats any setting), else from the settings, else from the label;
strategy from the settings, else from the label, else "unknown". Only a GPU with two replicas or more gets an
entry. Pure: no I/O, no clock; the stage hands in what the sources last said.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Iterable, Mapping

from watchdog.model import EMPTY, DeviceSharing, NodeSample

STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
SHARED_STRATEGIES = ("time-slicing", "mps")  # the label's values that name a mode ("none" names none)
_REPLICA_SEPARATOR = "::"


def split_replica(device_id: str) -> tuple[str, int | None]:
    """``"GPU-…::3"`` → ``("GPU-…", 3)``; an ID without a numeric replica suffix is returned whole."""
    base, separator, suffix = device_id.rpartition(_REPLICA_SEPARATOR)
    if separator and base and suffix.isdigit():
        return base, int(suffix)
    return device_id, None


def count_replicas(device_ids: Iterable[str]) -> dict[str, int]:
    """Device (base ID) → how many distinct IDs advertise it: n for ``<uuid>::0…n-1``, 1 for an unshared device."""
    seen: dict[str, set[str]] = {}
    for device_id in device_ids:
        seen.setdefault(split_replica(device_id)[0], set()).add(device_id)
    return {device: len(ids) for device, ids in seen.items()}


def shareable_gpus(sample: NodeSample) -> tuple[str, ...]:
    """The UUIDs of the sample's GPUs that the plugin can share as a whole: those not in MIG mode."""
    return tuple(gpu.uuid for gpu in sample.gpus if not gpu.mig_enabled and gpu.uuid)


def label_strategy(labels: Mapping[str, str] | None) -> str | None:
    """The mode GFD's label names, or None (absent, ``none``, or a value this code does not know)."""
    value = (labels or {}).get(STRATEGY_LABEL, "")
    return value if value in SHARED_STRATEGIES else None


def label_replicas(labels: Mapping[str, str] | None) -> int | None:
    """GFD's replica count, or None when absent or not a positive integer."""
    value = (labels or {}).get(REPLICAS_LABEL, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def device_sharing(
    gpus: Iterable[str],
    *,
    kubelet: Mapping[str, int] | None,
    labels: Mapping[str, str] | None,
    strategy: str | None = None,
    replicas: int | None = None,
) -> Mapping[str, DeviceSharing]:
    """GPU UUID → its sharing, for the GPUs of ``gpus`` with two replicas or more (read-only; EMPTY when none).

    ``kubelet``: replicas per device as the kubelet's allocatable devices count them (``count_replicas``), or None
    when the kubelet has not answered yet. ``labels``: the node's labels, or None when not read. ``strategy`` and
    ``replicas``: the settings' ``attribution.sharing`` (None: not set).
    """
    mode, mode_source = (strategy, "policy") if strategy else (label_strategy(labels), "labels")
    fallback, fallback_source = (replicas, "policy") if replicas is not None else (label_replicas(labels), "labels")
    found: dict[str, DeviceSharing] = {}
    for uuid in gpus:
        counted = kubelet.get(uuid) if kubelet is not None else None
        count, source = (counted, "kubelet") if counted is not None else (fallback, fallback_source)
        if count is None or count < 2:
            continue
        if mode is not None and mode_source != source:
            source = f"{source}+{mode_source}"
        found[uuid] = DeviceSharing(replicas=count, strategy=mode or "unknown", source=source)
    return MappingProxyType(found) if found else EMPTY
