"""The cluster around the simulated node as its administrators set it up: namespaces and the objects that keep its
tenants apart (a scenario's ``cluster:``), with the status the cluster's controllers would have given them.

A real cluster holds the namespaces its pods run in, ``default`` and the ``kube-*`` ones from its start, and the
agent's ``gpu-watchdog``; the API server labels each ``kubernetes.io/metadata.name=<name>`` (Kubernetes docs
"Namespaces", automatic labelling, GA in 1.22). The scenario's manifests are stored as ``kubectl apply`` would
leave them. No controller runs beside the fake API server, so what controllers write is written here: a Namespace's
phase ``Active``; a PersistentVolumeClaim ``Bound`` to a volume of its size (a dynamic provisioner's work); a
ResourceQuota's ``status.hard`` and ``status.used``, counted as the quota controller counts
(pkg/quota/v1/evaluator/core): pods not Succeeded or Failed, their containers' requests summed (``requests.<r>`` and
the bare ``<r>`` alike, limits standing in for extended resources, whose request equals their limit), ``pods``;
claims' ``requests.storage`` and ``persistentvolumeclaims``, also per StorageClass
(``<class>.storageclass.storage.k8s.io/…``); ResourceClaims' devices per DeviceClass
(``<class>.deviceclass.resource.k8s.io/devices``). Keys it does not model read 0.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from decimal import Decimal
from typing import Any, Iterable

from watchdog.isolation.quantity import QuantityError, format_quantity, parse_quantity
from watchdog.testbed.cluster.apiserver_store import (NAMESPACES, PODS, PVCS, QUOTAS, RESOURCE_CLAIMS,
                                                      RESOURCE_TYPES, ResourceType, Store)
from watchdog.testbed.scenario import ScenarioError
from watchdog.testbed.scenario_parts import ClusterSpec

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
NAME_LABEL = "kubernetes.io/metadata.name"
_STORAGE_CLASS = ".storageclass.storage.k8s.io/"
_DEVICE_CLASS = ".deviceclass.resource.k8s.io/devices"


def resource_of(manifest: dict[str, Any]) -> ResourceType:
    """The served resource a manifest's apiVersion and kind name; ValueError for one the fake does not serve."""
    for resource in RESOURCE_TYPES:
        if (resource.api_version, resource.kind) == (manifest.get("apiVersion"), manifest.get("kind")):
            return resource
    raise ValueError(f"{manifest.get('apiVersion')} {manifest.get('kind')} is not a kind the fake API server serves")


def namespace_object(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {**(labels or {}), NAME_LABEL: name}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


def _bound(claim: dict[str, Any]) -> dict[str, Any]:
    """The claim as its provisioner leaves it: bound to a volume of the size it asked for."""
    spec = claim.setdefault("spec", {})
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "0")
    spec.setdefault("volumeMode", "Filesystem")
    spec.setdefault("volumeName", f"pvc-{claim['metadata'].get('namespace', '')}-{claim['metadata']['name']}")
    claim["status"] = {"phase": "Bound", "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
                       "capacity": {"storage": storage}}
    return claim


def set_up(store: Store, cluster: ClusterSpec, *, namespaces: Iterable[str]) -> None:
    """Create the namespaces (the system ones, ``namespaces``, the scenario's) and the scenario's objects."""
    names = dict.fromkeys([*SYSTEM_NAMESPACES, *sorted(namespaces), *cluster.namespaces])
    for name in names:
        store.create(NAMESPACES, namespace_object(name, cluster.namespaces.get(name)))
    for index, manifest in enumerate(cluster.objects):
        try:
            resource = resource_of(manifest)
        except ValueError as error:
            raise ScenarioError(f"cluster.objects.{index}: {error}") from None
        obj = copy.deepcopy(manifest)
        if resource.namespaced != bool(obj["metadata"].get("namespace")):
            raise ScenarioError(f"cluster.objects.{index}: a {resource.kind} "
                                + ("needs metadata.namespace" if resource.namespaced else "has no namespace"))
        if resource is NAMESPACES:
            obj = namespace_object(obj["metadata"]["name"], obj["metadata"].get("labels"))
        elif resource is PVCS:
            obj = _bound(obj)
        store.create(resource, obj)
    refresh_quotas(store)


def _amount(value: Any) -> Decimal:
    try:
        return parse_quantity(value)
    except QuantityError:
        return Decimal(0)


def usage(store: Store, namespace: str) -> dict[str, Decimal]:
    """What the quota controller would count in ``namespace``, by quota key."""
    used: dict[str, Decimal] = defaultdict(Decimal)
    for pod in store.list(PODS, namespace):
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        used["pods"] += 1
        for container in (pod.get("spec") or {}).get("containers") or ():
            resources = container.get("resources") or {}
            wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            for name, value in wanted.items():
                used[f"requests.{name}"] += _amount(value)
                used[name] += _amount(value)
    for claim in store.list(PVCS, namespace):
        size = _amount(((claim.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage", 0))
        storage_class = (claim.get("spec") or {}).get("storageClassName") or ""
        for prefix in [""] + ([f"{storage_class}{_STORAGE_CLASS}"] if storage_class else []):
            used[f"{prefix}requests.storage"] += size
            used[f"{prefix}persistentvolumeclaims"] += 1
    for claim in store.list(RESOURCE_CLAIMS, namespace):
        for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ():
            exactly = request.get("exactly") or request
            if exactly.get("deviceClassName") and exactly.get("allocationMode", "ExactCount") == "ExactCount":
                used[f"{exactly['deviceClassName']}{_DEVICE_CLASS}"] += int(exactly.get("count", 1))
    return used


def refresh_quotas(store: Store) -> None:
    """Bring every ResourceQuota's status up to date; an unchanged one is not written (no watch event)."""
    by_namespace: dict[str, dict[str, Decimal]] = {}
    for quota in store.list(QUOTAS):
        namespace = quota["metadata"]["namespace"]
        used = by_namespace.setdefault(namespace, usage(store, namespace))
        hard = dict((quota.get("spec") or {}).get("hard") or {})
        status = {"hard": hard, "used": {key: format_quantity(used.get(key, Decimal(0))) for key in hard}}
        if quota.get("status") != status:
            quota["status"] = status
            store.update(QUOTAS, quota)
