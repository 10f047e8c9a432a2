"""The events part of ``gpu-watchdog probe``: can this node's driver deliver Xid events to us at all?

The Xid watcher is the only source of fault evidence with GI/CI ids, and nvml.h (nvmlEventSetWait_v2) says only
that MIG handles do not support per-instance events, not what a MIG handle answers to event calls, nor whether an
unprivileged container receives events in practice. So the probe
goes through the watcher's own steps once: create a set, ask each parent which types it supports, register the
watcher's mask (Xid | DBE | SBE | MIG config change, masked by what is supported, as k8s-device-plugin's
health.go does), ask one MIG handle, wait once briefly and free the set. An event set is process-local NVML
state: registering on it changes nothing on the GPU, so the probe stays read-only.

A wait that times out is the normal answer on a quiet node, not a failure: it is recorded as supported with
``"waited_ms": N, "events": 0, "outcome": "no_event"`` (its ``"error": "timeout"`` kept for older readers). Only an
error from creating the set or registering a GPU says events are not supported.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable, Sequence

from watchdog.sampling.xid_watcher import wanted_event_mask

Record = Callable[..., Any]  # probe._Recorder: (report, label, function, *args) → value or None


def probe_events(
    nvml: ModuleType,
    *,
    record: Record,
    parents: Sequence[tuple[int, Any]],
    mig_handle: Any = None,
    wait_ms: int = 100,
) -> dict[str, Any]:
    """Each event call's answer or error: set creation, per-GPU support and registration, one MIG handle's
    support, one wait of ``wait_ms`` (a Timeout is the normal answer on a quiet node) and freeing the set."""
    if wait_ms <= 0:
        raise ValueError(f"wait_ms must be positive, got {wait_ms}")
    wanted = wanted_event_mask(nvml)
    report: dict[str, Any] = {"wanted_mask": wanted, "gpus": []}
    event_set = record(report, "nvmlEventSetCreate", "nvmlEventSetCreate")
    registered = 0
    for index, handle in parents:
        gpu: dict[str, Any] = {"index": index}
        report["gpus"].append(gpu)
        supported = record(gpu, "nvmlDeviceGetSupportedEventTypes", "nvmlDeviceGetSupportedEventTypes", handle)
        if supported is None or event_set is None:
            continue
        mask = int(supported) & wanted
        gpu["mask"] = mask
        if not mask:
            continue  # nothing the watcher wants is supported here: registering would say NotSupported
        record(gpu, "nvmlDeviceRegisterEvents", "nvmlDeviceRegisterEvents", handle, mask, event_set)
        registered += int(gpu["nvmlDeviceRegisterEvents"]["supported"])  # the call returns None on success
    report["registered_gpus"] = registered
    if mig_handle is not None:
        mig: dict[str, Any] = {}
        record(mig, "nvmlDeviceGetSupportedEventTypes", "nvmlDeviceGetSupportedEventTypes", mig_handle)
        report["mig_device"] = mig
    if event_set is not None:  # the recorder catches every error, so the set is always freed
        record(report, "nvmlEventSetWait_v2", "nvmlEventSetWait_v2", event_set, int(wait_ms))
        report["nvmlEventSetWait_v2"].update(wait_outcome(report["nvmlEventSetWait_v2"], wait_ms=int(wait_ms)))
        record(report, "nvmlEventSetFree", "nvmlEventSetFree", event_set)
    return report


def wait_outcome(answer: dict[str, Any], *, wait_ms: int) -> dict[str, Any]:
    """The fields that say what one wait found: an event, none within ``wait_ms`` (Timeout), or an error."""
    if answer.get("supported"):
        return {"waited_ms": wait_ms, "events": 1, "outcome": "event"}
    if answer.get("error") == "timeout":  # nvml.h, nvmlEventSetWait_v2: no event arrived within the timeout
        return {"supported": True, "waited_ms": wait_ms, "events": 0, "outcome": "no_event"}
    return {"outcome": "error"}
