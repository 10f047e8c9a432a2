"""Version 2's compact tick line: what the reader can infer is left out, so a day of a dense node fits on a node.

Version 1 wrote every field of every dataclass and the whole pod cache on every line: 68 KB per tick on a
56-instance node, 5.9 GB per node per day at 1 Hz. Version 2 writes the same information in less:

- a field equal to its dataclass default (``None``, ``False``, ``0``, an empty list) is left out, unless the
  schema requires it (``sample.gpus``, a GPU's ``index``, an Xid's ids …) — the decoder
  already fills defaults in, so the round trip stays exact; a field added later with a default (the additive
  rule of docs/trace-format.md) is compacted the same way without a change here;
- the sample's ``node``, ``tick`` and ``timestamp`` are left out when the header and the line already say them;
- ``attribution`` is written when it differs from the last one written; a line with the same attribution says
  ``"attribution_from": T`` instead, T being the tick of the line that holds it in full.

The decoder of :mod:`watchdog.trace.codec` reads both versions; only the writer chooses.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

from watchdog.model import (GpuSample, MigSample, NodeSample, PodInfo, ProcessSample, VgpuRunlist, VgpuSample,
                            XidEvent)
from watchdog.trace.parsing import schema

Json = dict[str, Any]


def _defaults(cls: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(cls):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    return out


_DEFINITIONS = {NodeSample: "sample", GpuSample: "gpu", MigSample: "mig", ProcessSample: "process", XidEvent: "xid",
                PodInfo: "pod", VgpuSample: "vgpu", VgpuRunlist: "vgpu_runlist"}
_REQUIRED = {cls: frozenset(schema()["$defs"][name].get("required", ())) for cls, name in _DEFINITIONS.items()}
# A field the schema requires is written even when it holds its default (an empty gpus list, GPU index 0).
_DEFAULTS = {cls: {key: value for key, value in _defaults(cls).items() if key not in _REQUIRED[cls]}
             for cls in _DEFINITIONS}
_ABSENT = object()


def _is_default(value: Any, default: Any) -> bool:
    if default is _ABSENT:
        return False
    if value is None or default is None:
        return value is default
    if isinstance(value, (list, dict)):
        return not value and hasattr(default, "__len__") and not len(default)
    # type, not only value: 0 == 0.0 == False in Python, and a dropped 0 must come back as the same type
    return type(value) is type(default) and value == default


def prune(data: Json, cls: type) -> Json:
    """``data`` (an encoded ``cls``) without the fields that equal ``cls``'s defaults."""
    defaults = _DEFAULTS[cls]
    return {key: value for key, value in data.items() if not _is_default(value, defaults.get(key, _ABSENT))}


def compact_sample(sample: Json, *, node: str, tick: int, timestamp: float | None) -> Json:
    """An encoded NodeSample (codec.encode_sample) with defaults and what the line and header say left out."""
    out = prune(sample, NodeSample)
    for key, known in (("node", node), ("tick", tick), ("timestamp", timestamp)):
        if key in out and out[key] == known and type(out[key]) is type(known):
            del out[key]
    if "gpus" in out:
        out["gpus"] = [_compact_gpu(gpu) for gpu in out["gpus"]]
    if "xids" in out:
        out["xids"] = [prune(event, XidEvent) for event in out["xids"]]
    return out


def _compact_gpu(gpu: Json) -> Json:
    out = prune(gpu, GpuSample)
    if "instances" in out:
        out["instances"] = [_compact_mig(mig) for mig in out["instances"]]
    if "processes" in out:
        out["processes"] = [prune(proc, ProcessSample) for proc in out["processes"]]
    if "vgpus" in out:
        out["vgpus"] = [prune(vgpu, VgpuSample) for vgpu in out["vgpus"]]
    if "vgpu_runlists" in out:
        out["vgpu_runlists"] = [prune(runlist, VgpuRunlist) for runlist in out["vgpu_runlists"]]
    return out


def _compact_mig(mig: Json) -> Json:
    out = prune(mig, MigSample)
    if "processes" in out:
        out["processes"] = [prune(proc, ProcessSample) for proc in out["processes"]]
    return out


def compact_attribution(attribution: Json) -> Json:
    """An encoded Attribution with each pod's default fields left out (``healthy`` always stays: it is required)."""
    out = dict(attribution)
    if out.get("kubelet_ok") is True:
        del out["kubelet_ok"]
    if out.get("api_ok") is True:
        del out["api_ok"]
    if "slices_ok" in out and out["slices_ok"] is None:
        del out["slices_ok"]
    if out.get("claims_held") == 0:
        del out["claims_held"]
    for key in ("devices", "processes", "pods", "claims", "sharing"):
        if key in out and not out[key]:
            del out[key]
    if "pods" in out:
        out["pods"] = [prune(pod, PodInfo) for pod in out["pods"]]
    return out
