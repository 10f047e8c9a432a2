"""Turns one tick of the pipeline (NodeSample + Attribution) into plain JSON data and back, exactly.

A recorded trace is only worth something if replaying it feeds detection the very values the agent saw, so the
mapping is field-for-field with the dataclasses in :mod:`watchdog.model` and the round trip is exact: Python's
``json`` writes floats with ``repr``, which reads back to the same double. Decoding is lenient about what may be
left out (a hand-written trace names only what it needs; the rest takes the dataclass default) but never about
types: :func:`decode_tick` expects data that already passed the JSON Schema (see :mod:`watchdog.trace.io`).
"""

from __future__ import annotations

import math
from dataclasses import fields
from functools import cache
from types import MappingProxyType
from typing import Any, Mapping

from watchdog.model import (
    Attribution,
    ClaimRef,
    ContainerInfo,
    DeviceSharing,
    EMPTY,
    GpuSample,
    HostProcess,
    InstanceActivity,
    MigSample,
    NodeSample,
    PodIndex,
    PodInfo,
    PodRef,
    ProcessSample,
    Rejection,
    VgpuRunlist,
    VgpuSample,
    XidEvent,
)
from watchdog.trace.codec_vms import decode_vgpu_owners, decode_vmis, encode_vgpu_owners, encode_vmis

Json = dict[str, Any]

# Fields whose dataclass annotation is a float: JSON has one number type, so 300.0 may come back as 300;
# decoding turns these back into floats so that types, not only values, survive the round trip.
# Likewise JSON Schema's "integer" admits 3.0, which must come back as the int 3.
_TYPED = (ProcessSample, MigSample, VgpuSample, VgpuRunlist, GpuSample, XidEvent, NodeSample, PodInfo)
_FLOAT_FIELDS = {cls: frozenset(f.name for f in fields(cls) if str(f.type).startswith("float")) for cls in _TYPED}
_INT_FIELDS = {cls: frozenset(f.name for f in fields(cls) if str(f.type).startswith("int")) for cls in _TYPED}


def _number(value: Any) -> Any:
    # JSON has no NaN/Infinity; a non-finite reading carries no information, and None means "not available".
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _flat(obj: Any, skip: tuple[str, ...] = ()) -> Json:
    return {f.name: _number(getattr(obj, f.name)) for f in fields(obj) if f.name not in skip}


@cache
def _field_kinds(cls: type) -> tuple[tuple[str, type | None], ...]:
    # Once per class, not once per object: replay decodes ~120 objects per tick of a dense node.
    floats, ints = _FLOAT_FIELDS.get(cls, frozenset()), _INT_FIELDS.get(cls, frozenset())
    return tuple((f.name, float if f.name in floats else int if f.name in ints else None) for f in fields(cls) if f.init)


def _build(cls: type, data: Mapping[str, Any], **nested: Any) -> Any:
    kwargs: dict[str, Any] = {}
    for name, kind in _field_kinds(cls):
        if name in nested:
            kwargs[name] = nested[name]
        elif name in data:
            value = data[name]
            kwargs[name] = kind(value) if kind is not None and value is not None else value
    return cls(**kwargs)


# ------------------------------------------------------------------------------------------------ sample


def encode_sample(sample: NodeSample) -> Json:
    out = _flat(sample, skip=("gpus", "xids", "rejected", "quarantined"))
    out["gpus"] = [_encode_gpu(gpu) for gpu in sample.gpus]
    out["xids"] = [_flat(event) for event in sample.xids]
    out["rejected"] = [_flat(rejection) for rejection in sample.rejected]
    out["quarantined"] = sorted(sample.quarantined)  # sorted: equal samples write equal lines
    return out


_VGPU_HOST_SCALARS = ("vgpu_scheduler", "vgpu_scheduler_arr", "vgpu_timeslice_seconds")


def _encode_gpu(gpu: GpuSample) -> Json:
    out = _flat(gpu, skip=("instances", "processes", "vgpus", *_VGPU_HOST_SCALARS, "vgpu_runlists"))
    out["instances"] = [_encode_mig(mig) for mig in gpu.instances]
    out["processes"] = [_flat(proc) for proc in gpu.processes]
    # Additive (docs/trace-format.md): written only on a vGPU host GPU, so other GPUs' lines stay as they were.
    if gpu.vgpus:
        out["vgpus"] = [_flat(vgpu) for vgpu in gpu.vgpus]
    for name in _VGPU_HOST_SCALARS:
        if getattr(gpu, name) is not None:
            out[name] = getattr(gpu, name)
    if gpu.vgpu_runlists:
        out["vgpu_runlists"] = [_flat(runlist) for runlist in gpu.vgpu_runlists]
    return out


def _encode_mig(mig: MigSample) -> Json:
    out = _flat(mig, skip=("processes",))
    out["processes"] = [_flat(proc) for proc in mig.processes]
    return out


def decode_sample(data: Mapping[str, Any]) -> NodeSample:
    return _build(
        NodeSample,
        data,
        gpus=tuple(_decode_gpu(gpu) for gpu in data.get("gpus", ())),
        xids=tuple(_build(XidEvent, event) for event in data.get("xids", ())),
        rejected=tuple(_build(Rejection, rejection) for rejection in data.get("rejected", ())),
        quarantined=frozenset(data.get("quarantined", ())),
    )


def _decode_gpu(data: Mapping[str, Any]) -> GpuSample:
    return _build(
        GpuSample,
        data,
        instances=tuple(_decode_mig(mig) for mig in data.get("instances", ())),
        processes=tuple(_decode_process(proc) for proc in data.get("processes", ())),
        vgpus=tuple(_build(VgpuSample, vgpu) for vgpu in data.get("vgpus", ())),
        vgpu_runlists=tuple(_build(VgpuRunlist, runlist) for runlist in data.get("vgpu_runlists", ())),
    )


def _decode_mig(data: Mapping[str, Any]) -> MigSample:
    return _build(MigSample, data, processes=tuple(_decode_process(proc) for proc in data.get("processes", ())))


def _decode_process(data: Mapping[str, Any]) -> ProcessSample:
    return _build(ProcessSample, {"used_memory_bytes": None, **data})


# ------------------------------------------------------------------------------------------- attribution


def encode_pod_ref(ref: PodRef) -> Json:
    return {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid, "container": ref.container}


def decode_pod_ref(data: Mapping[str, Any] | str) -> PodRef:
    """A pod reference is an object, or (for hand-written traces) the string "namespace/name"."""
    if isinstance(data, str):
        namespace, _, name = data.partition("/")
        return PodRef(namespace, name)
    return _build(PodRef, data)


def encode_attribution(attribution: Attribution) -> Json:
    return {
        "healthy": attribution.healthy,
        "kubelet_ok": attribution.kubelet_ok,
        "api_ok": attribution.api_ok,
        "devices": {uuid: [encode_pod_ref(ref) for ref in refs] for uuid, refs in attribution.devices.items()},
        "processes": {str(pid): encode_pod_ref(ref) for pid, ref in attribution.processes.items()},
        "pods": [_encode_pod(info) for info in attribution.pods.values()],
        "claims": _encode_claims(attribution.claims),
        "slices_ok": attribution.slices_ok,
        "claims_held": attribution.claims_held,
        # Optional (with the unauthorized_host finding): written only when some process NVML reports is in no pod.
        **({"host_processes": {str(pid): {"cgroup": host.cgroup, "command": host.command}
                               for pid, host in attribution.host_processes.items()}}
           if attribution.host_processes else {}),
        # Optional: written only when NVML reported the MPS server (or other node infrastructure).
        **({"infrastructure": sorted(attribution.infrastructure)} if attribution.infrastructure else {}),
        # Optional: written only when some GPU is shared (time-slicing or MPS replicas).
        **({"sharing": {uuid: {"replicas": sharing.replicas, "strategy": sharing.strategy, "source": sharing.source}
                        for uuid, sharing in sorted(attribution.sharing.items())}}
           if attribution.sharing else {}),
        # Optional: written only on a vGPU host whose VMs' vGPUs were joined to their VMIs.
        **({"vgpus": encode_vgpu_owners(attribution.vgpus, encode_pod_ref)} if attribution.vgpus else {}),
        # Optional: written only where KubeVirt VMIs run on the node (what the action rules know of each).
        **({"vmis": encode_vmis(attribution.vmis)} if attribution.vmis else {}),
    }


def _encode_claims(claims: Mapping[tuple[str, str], ClaimRef]) -> Json:
    # Nested by device like "devices", so a hand-written trace reads the same way: uuid → "ns/pod" → claim.
    out: dict[str, Json] = {}
    for (uuid, pod_key), claim in sorted(claims.items()):
        out.setdefault(uuid, {})[pod_key] = {"namespace": claim.namespace, "name": claim.name}
    return out


def _decode_claims(data: Mapping[str, Mapping[str, Mapping[str, str]]]) -> Mapping[tuple[str, str], ClaimRef]:
    if not data:
        return MappingProxyType({})
    return MappingProxyType({
        (uuid, pod_key): ClaimRef(namespace=claim["namespace"], name=claim["name"])
        for uuid, holders in data.items() for pod_key, claim in holders.items()
    })


def _encode_pod(info: PodInfo) -> Json:
    out = _flat(info, skip=("labels", "annotations", "containers", "gpu_resources"))
    out["labels"] = dict(info.labels)
    out["annotations"] = dict(info.annotations)
    out["containers"] = [{"name": c.name, "container_id": c.container_id} for c in info.containers]
    out["gpu_resources"] = list(info.gpu_resources)
    return out


def _decode_pod(data: Mapping[str, Any]) -> PodInfo:
    return _build(
        PodInfo,
        data,
        labels=MappingProxyType(dict(data.get("labels", {}))),
        annotations=MappingProxyType(dict(data.get("annotations", {}))),
        containers=tuple(_build(ContainerInfo, c) for c in data.get("containers", ())),
        gpu_resources=tuple(data.get("gpu_resources", ())),
    )


def decode_attribution(data: Mapping[str, Any]) -> Attribution:
    devices: dict[str, list[PodRef]] = {
        uuid: [decode_pod_ref(ref) for ref in refs] for uuid, refs in data.get("devices", {}).items()
    }
    pods: dict[str, PodInfo] = {}
    for pod_data in data.get("pods", ()):
        info = _decode_pod(pod_data)
        pods[info.uid] = info
        # A hand-written trace may list a pod's devices on the pod itself instead of in the devices map.
        for uuid in pod_data.get("devices", ()):
            holders = devices.setdefault(uuid, [])
            if all(ref.key != info.ref.key for ref in holders):
                holders.append(info.ref)
    processes = {int(pid): decode_pod_ref(ref) for pid, ref in data.get("processes", {}).items()}
    hosts = {int(pid): _build(HostProcess, host) for pid, host in data.get("host_processes", {}).items()}
    return Attribution(
        devices=MappingProxyType({uuid: tuple(refs) for uuid, refs in devices.items()}),
        processes=MappingProxyType(processes),
        index=PodIndex(pods),  # the tenant label is the replay's to apply (Attribution.with_tenant_label)
        claims=_decode_claims(data.get("claims", {})),
        slices_ok=data.get("slices_ok"),
        claims_held=int(data.get("claims_held", 0)),
        # Required by the schema; a caller that skipped it gets "unhealthy", never a licence to act on absences.
        healthy=bool(data.get("healthy", False)),
        kubelet_ok=data.get("kubelet_ok", True),
        api_ok=data.get("api_ok", True),
        host_processes=MappingProxyType(hosts) if hosts else EMPTY,
        infrastructure=frozenset(int(pid) for pid in data.get("infrastructure", ())),
        sharing=_decode_sharing(data.get("sharing", {})),
        vgpus=decode_vgpu_owners(data.get("vgpus", {}), decode_pod_ref),
        vmis=decode_vmis(data.get("vmis", {})),
    )


def _decode_sharing(data: Mapping[str, Mapping[str, Any]]) -> Mapping[str, DeviceSharing]:
    # A hand-written trace may leave out the strategy ("unknown") and the source (it was learned from the trace).
    if not data:
        return EMPTY
    return MappingProxyType({
        uuid: DeviceSharing(replicas=int(entry["replicas"]), strategy=entry.get("strategy", "unknown"),
                            source=entry.get("source", "trace"))
        for uuid, entry in data.items()
    })


# -------------------------------------------------------------------------------------------------- tick


def encode_tick(
    sample: NodeSample,
    attribution: Attribution,
    external_signals: Mapping[str, float] | None = None,
    *,
    borrowed_activity: Mapping[str, InstanceActivity] | None = None,
) -> Json:
    """One trace line (as a dict) for one tick.

    ``external_signals`` ("ns/pod" → value) are the outside performance signals the detector was given this tick
    (docs/trace-format.md); without them a replay could not reproduce an interference finding they drove. Left out
    of the line when None; a non-finite value is dropped (JSON cannot carry it and it carries no information).
    ``borrowed_activity`` ("<GPU UUID>/<GI id>" → InstanceActivity) is the per-instance activity read from outside
    NVML that detection was given, recorded the same way (only the signals that had a value).
    """
    line: Json = {
        "tick": sample.tick,
        "timestamp": _number(sample.timestamp),
        "sample": encode_sample(sample),
        "attribution": encode_attribution(attribution),
    }
    if external_signals is not None:
        line["external_signals"] = {
            key: float(value) for key, value in external_signals.items() if math.isfinite(float(value))
        }
    if borrowed_activity is not None:
        line["borrowed_activity"] = {
            key: {name: float(value) for name in ("sm", "dram", "graphics")
                  if (value := getattr(activity, name)) is not None and math.isfinite(value)}
            for key, activity in borrowed_activity.items()
        }
    return line


def decode_tick(data: Mapping[str, Any], *, node: str | None = None) -> tuple[NodeSample, Attribution]:
    """The inverse of :func:`encode_tick` (without the external signals: see :func:`decode_tick_signals`).

    A sample may leave out ``node``, ``tick`` and ``timestamp``: they then come from ``node`` (the trace header)
    and from the line itself. When both are given they must agree, or ``ValueError`` names the field.
    """
    sample_data = dict(data.get("sample", {}))
    for name, line_value in (("tick", data.get("tick")), ("timestamp", data.get("timestamp")), ("node", node)):
        if line_value is None:
            continue
        if name not in sample_data:
            sample_data[name] = line_value
        elif sample_data[name] != line_value:
            where = "header" if name == "node" else "line"
            raise ValueError(f"sample.{name}: {sample_data[name]!r} differs from the {where}'s {line_value!r}")
    for name in ("node", "tick", "timestamp"):
        if name not in sample_data:
            raise ValueError(f"sample.{name}: missing (and not given by the line or header)")
    return decode_sample(sample_data), decode_attribution(data.get("attribution", {}))


def decode_tick_signals(data: Mapping[str, Any]) -> Mapping[str, float] | None:
    """The line's ``external_signals`` as "ns/pod" → float, or None when the line has none (not recorded)."""
    signals = data.get("external_signals")
    if signals is None:
        return None
    return MappingProxyType({str(key): float(value) for key, value in signals.items()})


def decode_tick_activity(data: Mapping[str, Any]) -> Mapping[str, InstanceActivity] | None:
    """The line's ``borrowed_activity`` as "<GPU UUID>/<GI id>" → InstanceActivity, or None when not recorded."""
    activity = data.get("borrowed_activity")
    if activity is None:
        return None
    return MappingProxyType({
        str(key): InstanceActivity(**{name: float(value) for name, value in signals.items()})
        for key, signals in activity.items()
    })
