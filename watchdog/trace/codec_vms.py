"""The KubeVirt part of a trace's attribution: which VMI holds each vGPU, and what the action rules know of each VMI.

A replay (and a fleet what-if, which is one) must decide about a virt-launcher pod exactly as the agent did: whether
its VM live-migrates, is passed a whole GPU through, is migrating already (action/vm_rules.py). Those facts come from
the VMI, not from the pod, so a trace that carried only the vGPU → VMI join would leave every launcher pod
`unsafe` offline. Both maps are optional and additive (docs/trace-format.md): absent in older traces and on nodes
without KubeVirt; a VMI entry writes only the fields that differ from ``VmiInfo``'s defaults.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from types import MappingProxyType
from typing import Any, Callable, Mapping

from watchdog.model import EMPTY, PodRef, VgpuOwner, VmiInfo

Json = dict[str, Any]
# Every field but the identity, with the value left out of a trace entry (a required field: the empty string).
_VMI_DEFAULTS = {f.name: ("" if f.default is MISSING else f.default)
                 for f in fields(VmiInfo) if f.name not in ("namespace", "name", "uid")}
_TUPLES = ("passthrough", "vgpu_resources")


def encode_vgpu_owners(owners: Mapping[str, VgpuOwner], encode_ref: Callable[[PodRef], Any]) -> Json:
    out: Json = {}
    for uuid, owner in sorted(owners.items()):
        entry: Json = {"namespace": owner.namespace, "vmi": owner.vmi}
        if owner.pod is not None:
            entry["pod"] = encode_ref(owner.pod)
        out[uuid] = entry
    return out


def decode_vgpu_owners(data: Mapping[str, Mapping[str, Any]],
                       decode_ref: Callable[[Any], PodRef]) -> Mapping[str, VgpuOwner]:
    # A hand-written trace may give the launcher pod as "namespace/name"; no pod: the VMI has no live launcher here.
    if not data:
        return EMPTY
    return MappingProxyType({
        uuid: VgpuOwner(namespace=entry["namespace"], vmi=entry["vmi"],
                        pod=decode_ref(entry["pod"]) if entry.get("pod") is not None else None)
        for uuid, entry in data.items()
    })


def encode_vmis(vmis: Mapping[str, VmiInfo]) -> Json:
    """VMI uid → its namespace and name, and every other field only where it is not the default."""
    out: Json = {}
    for uid, vmi in sorted(vmis.items()):
        entry: Json = {"namespace": vmi.namespace, "name": vmi.name}
        for name, default in _VMI_DEFAULTS.items():
            value = getattr(vmi, name)
            if value != default:
                entry[name] = list(value) if name in _TUPLES else value
        out[uid] = entry
    return out


def decode_vmis(data: Mapping[str, Mapping[str, Any]]) -> Mapping[str, VmiInfo]:
    if not data:
        return EMPTY
    decoded: dict[str, VmiInfo] = {}
    for uid, entry in data.items():
        kwargs = {name: (tuple(entry.get(name, default)) if name in _TUPLES else entry.get(name, default))
                  for name, default in _VMI_DEFAULTS.items()}
        decoded[uid] = VmiInfo(namespace=entry["namespace"], name=entry["name"], uid=uid, **kwargs)
    return MappingProxyType(decoded)
