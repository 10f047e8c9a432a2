"""The isolation audit's reads: list the kinds it checks, namespace by namespace, and keep going past failures.

Namespaced kinds are listed per selected namespace rather than cluster-wide, so an identity bound to a Role in some
namespaces can still audit those, and a namespace it may not read becomes one error line in the report (403 names
the namespace) instead of ending the run. Only ``get``/``list`` are used (deploy/rbac.yaml grants exactly these).
An unreachable API server stops the run after the first failure rather than timing out once per request.
ResourceClaims (resource.k8s.io/v1) are served from Kubernetes 1.34: a 404 on their collection means the cluster has
no Dynamic Resource Allocation, hence no claims, not a read failure, and they are not asked for again. KubeVirt's
VirtualMachineInstances (kubevirt.io/v1) likewise: a 404 means no KubeVirt.
"""

from __future__ import annotations

from typing import Any

from watchdog.kube.client import KubeApi
from watchdog.kube.errors import KubeError, KubeNotFound, KubeUnavailable
from watchdog.model.cluster import CLUSTER_KINDS, NAMESPACED_KINDS, ClusterObjects, ReadError

# Where each kind is listed (the core group, networking.k8s.io/v1, storage.k8s.io/v1, scheduling.k8s.io/v1).
_PATHS = {
    "namespaces": "/api/v1/namespaces", "nodes": "/api/v1/nodes",
    "storageclasses": "/apis/storage.k8s.io/v1/storageclasses",
    "priorityclasses": "/apis/scheduling.k8s.io/v1/priorityclasses",
    "pods": "/api/v1/namespaces/{ns}/pods", "resourcequotas": "/api/v1/namespaces/{ns}/resourcequotas",
    "limitranges": "/api/v1/namespaces/{ns}/limitranges",
    "persistentvolumeclaims": "/api/v1/namespaces/{ns}/persistentvolumeclaims",
    "networkpolicies": "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
    "resourceclaims": "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims",
    "virtualmachineinstances": "/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances",
}
_OPTIONAL = frozenset({"resourceclaims", "virtualmachineinstances"})  # kinds a cluster may not serve (404: none)


async def _list(api: KubeApi, path: str, *, label_selector: str = "") -> list[dict[str, Any]]:
    answer = await api.request_json("GET", path, query={"labelSelector": label_selector} if label_selector else None)
    items = answer.get("items")
    if not isinstance(items, list):
        raise KubeError(f"GET {path}: the answer has no items list")
    return [item for item in items if isinstance(item, dict)]


async def read_cluster(api: KubeApi, *, namespace_selector: str = "") -> ClusterObjects:
    """Everything the audit needs from the namespaces ``namespace_selector`` picks (a label selector; "" = all)."""
    read = ClusterObjects()
    for kind in CLUSTER_KINDS:
        try:
            read.objects[kind] = await _list(api, _PATHS[kind],
                                             label_selector=namespace_selector if kind == "namespaces" else "")
        except KubeError as error:
            read.objects[kind] = []
            read.errors.append(ReadError(kind, "", error.message))
            if isinstance(error, KubeUnavailable):
                return read
    for kind in NAMESPACED_KINDS:
        read.objects[kind] = []
    not_served: set[str] = set()
    for namespace in read.objects["namespaces"]:
        name = (namespace.get("metadata") or {}).get("name", "")
        for kind in NAMESPACED_KINDS:
            if kind in not_served:
                continue
            try:
                read.objects[kind].extend(await _list(api, _PATHS[kind].format(ns=name)))
            except KubeError as error:
                if isinstance(error, KubeNotFound) and kind in _OPTIONAL:
                    not_served.add(kind)
                    continue
                read.errors.append(ReadError(kind, name, error.message))
                if isinstance(error, KubeUnavailable):
                    return read
    return read
