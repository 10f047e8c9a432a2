"""What a namespace's ResourceClaims ask of each GPU device class, as a ResourceQuota on device classes counts it.

A tenant that gets its GPUs through Dynamic Resource Allocation requests no ``nvidia.com/*`` extended resource, so
the extended-resource quota check sees nothing; what caps it is a ResourceQuota item
``<device-class>.deviceclass.resource.k8s.io/devices`` (Kubernetes docs "Resource Quotas", "ResourceQuota for
device classes"), which counts the devices the namespace's ResourceClaims request from that class, allocated or not
(a claim generated from a pod's ResourceClaimTemplate is a ResourceClaim in the pod's namespace and counts the
same). A request (resource.k8s.io/v1 ``DeviceRequest``) names its class under ``exactly.deviceClassName`` with
``count`` (default 1) in allocationMode ``ExactCount``; ``firstAvailable`` lists alternatives, each with its own
class and count, and any of them may be the one allocated, so each alternative's class needs the cap;
``allocationMode: All`` takes every matching device, a number no claim states. v1beta1 objects (served until the
cluster moves to v1) put ``deviceClassName`` and ``count`` on the request itself; both shapes are read.

GPU device classes are those of NVIDIA's DRA driver for GPUs (NVIDIA/k8s-dra-driver-gpu,
deployments/helm/nvidia-dra-driver-gpu/templates: ``gpu.nvidia.com``, ``mig.nvidia.com``), and any class named
``*.gpu.nvidia.com``/``*.mig.nvidia.com`` (a platform's narrower class, e.g. ``h100.gpu.nvidia.com``). The
driver's ComputeDomain classes (``compute-domain-*.nvidia.com``, IMEX channels) are not GPUs. Pure: no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Iterable

QUOTA_SUFFIX = ".deviceclass.resource.k8s.io/devices"
_GPU_CLASSES = ("gpu.nvidia.com", "mig.nvidia.com")


def is_gpu_device_class(name: str) -> bool:
    return name in _GPU_CLASSES or name.endswith(tuple(f".{c}" for c in _GPU_CLASSES))


def quota_key(device_class: str) -> str:
    """The ResourceQuota ``spec.hard`` key that caps ``device_class``."""
    return f"{device_class}{QUOTA_SUFFIX}"


@dataclass(frozen=True, slots=True)
class ClaimedDevices:
    """GPU devices a namespace's claims request, by device class; ``uncounted`` names the classes some request
    takes in allocationMode All (no count), ``problems`` the requests that could not be read."""

    by_class: dict[str, Decimal]
    uncounted: frozenset[str] = frozenset()
    problems: tuple[str, ...] = ()


def _count(request: dict[str, Any]) -> Decimal | None:
    if request.get("allocationMode") == "All":
        return None
    value = request.get("count", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"count {value!r} is not a positive integer")
    return Decimal(value)


def _choices(request: dict[str, Any]) -> list[dict[str, Any]]:
    if isinstance(request.get("exactly"), dict):
        return [request["exactly"]]
    if isinstance(request.get("firstAvailable"), list):
        return [sub for sub in request["firstAvailable"] if isinstance(sub, dict)]
    return [request]  # v1beta1: the class and count sit on the request


def claimed_gpu_devices(claims: Iterable[dict[str, Any]]) -> ClaimedDevices:
    """The GPU devices ``claims`` (ResourceClaim objects of one namespace) request, as quota counts them."""
    by_class: dict[str, Decimal] = defaultdict(Decimal)
    uncounted: set[str] = set()
    problems: list[str] = []
    for claim in claims:
        name = f"{(claim.get('metadata') or {}).get('namespace', '')}/{(claim.get('metadata') or {}).get('name', '')}"
        requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ()
        for request in requests if isinstance(requests, list) else ():
            if not isinstance(request, dict):
                continue
            for choice in _choices(request):
                device_class = choice.get("deviceClassName")
                if not isinstance(device_class, str) or not is_gpu_device_class(device_class):
                    continue
                try:
                    count = _count(choice)
                except ValueError as error:
                    problems.append(f"ResourceClaim {name}: request {request.get('name')}: {error}")
                    continue
                if count is None:
                    uncounted.add(device_class)
                    by_class[device_class] += 0
                else:
                    by_class[device_class] += count
    return ClaimedDevices(dict(by_class), frozenset(uncounted), tuple(problems))
