"""The fake API server's storage: objects, one resourceVersion counter, and a bounded event log for watches.

What clients rely on, and why it is modelled here rather than stubbed:
- resourceVersion is one cluster-wide, increasing counter (etcd's revision; docs "Resource versions"), so a bookmark
  or a list can carry a version newer than any pod's, and a watch resumes "from" any version it was given.
- The watch cache keeps a window of recent events (staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go);
  a watch from a version older than the window gets an ERROR event carrying 410 Gone "too old resource version",
  which is what forces a client to relist. ``expire_history`` moves the window forward on demand.
- A watch with a selector sees an object that stops matching as DELETED and one that starts matching as ADDED
  (cacher/cache_watcher.go, convertToWatchEvent), so every event keeps the object's previous state.
"""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from watchdog.testbed.cluster.apiserver_selectors import (EVENT_FIELDS, META_FIELDS, NODE_FIELDS, POD_FIELDS,
                                                          SLICE_FIELDS)


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One REST resource: where it lives and how it is named in messages."""

    prefix: str  # "/api/v1" or "/apis/<group>/<version>"
    plural: str
    kind: str
    namespaced: bool = True
    field_labels: frozenset[str] = META_FIELDS

    @property
    def api_version(self) -> str:
        return self.prefix.removeprefix("/apis/").removeprefix("/api/")

    @property
    def qualified(self) -> str:
        """``pods`` or ``leases.coordination.k8s.io``: the name errors use (apierrors qualifiedResource)."""
        group = self.api_version.rpartition("/")[0]
        return f"{self.plural}.{group}" if group else self.plural


PODS = ResourceType("/api/v1", "pods", "Pod", field_labels=POD_FIELDS)
NODES = ResourceType("/api/v1", "nodes", "Node", namespaced=False, field_labels=NODE_FIELDS)
EVENTS = ResourceType("/api/v1", "events", "Event", field_labels=EVENT_FIELDS)
CONFIGMAPS = ResourceType("/api/v1", "configmaps", "ConfigMap")
QUOTAS = ResourceType("/api/v1", "resourcequotas", "ResourceQuota")
EVENTS_V1 = ResourceType("/apis/events.k8s.io/v1", "events", "Event")
PDBS = ResourceType("/apis/policy/v1", "poddisruptionbudgets", "PodDisruptionBudget")
PRIORITY_CLASSES = ResourceType("/apis/scheduling.k8s.io/v1", "priorityclasses", "PriorityClass", namespaced=False)
LEASES = ResourceType("/apis/coordination.k8s.io/v1", "leases", "Lease")
# What the isolation audit reads besides the above (gpu-watchdog audit): plain stored objects, generic verbs.
NAMESPACES = ResourceType("/api/v1", "namespaces", "Namespace", namespaced=False)
LIMIT_RANGES = ResourceType("/api/v1", "limitranges", "LimitRange")
PVCS = ResourceType("/api/v1", "persistentvolumeclaims", "PersistentVolumeClaim")
NETWORK_POLICIES = ResourceType("/apis/networking.k8s.io/v1", "networkpolicies", "NetworkPolicy")
STORAGE_CLASSES = ResourceType("/apis/storage.k8s.io/v1", "storageclasses", "StorageClass", namespaced=False)
RESOURCE_TYPES = (PODS, NODES, EVENTS, CONFIGMAPS, QUOTAS, EVENTS_V1, PDBS, PRIORITY_CLASSES, LEASES,
                  NAMESPACES, LIMIT_RANGES, PVCS, NETWORK_POLICIES, STORAGE_CLASSES)
# Dynamic Resource Allocation (resource.k8s.io/v1): the GPU driver's ResourceSlices (cluster-scoped) and the
# ResourceClaims pods get devices through.
RESOURCE_SLICES = ResourceType("/apis/resource.k8s.io/v1", "resourceslices", "ResourceSlice", namespaced=False,
                               field_labels=SLICE_FIELDS)
RESOURCE_CLAIMS = ResourceType("/apis/resource.k8s.io/v1", "resourceclaims", "ResourceClaim")
RESOURCE_TYPES += (RESOURCE_SLICES, RESOURCE_CLAIMS)
# KubeVirt's custom resources (kubevirt.io/v1), served on vGPU hosts. As CRDs they take no field selector beyond
# metadata.name/namespace, which is why KubeVirt labels each VMI with kubevirt.io/nodeName (NodeNameLabel in
# kubevirt/kubevirt staging/src/kubevirt.io/api/core/v1/types.go: "Needed because with CRDs we can't use field
# selectors").
VMIS = ResourceType("/apis/kubevirt.io/v1", "virtualmachineinstances", "VirtualMachineInstance")
VMI_MIGRATIONS = ResourceType("/apis/kubevirt.io/v1", "virtualmachineinstancemigrations",
                              "VirtualMachineInstanceMigration")
# The KubeVirt CR (namespaced, one per cluster) whose spec.configuration.evictionStrategy is the cluster-wide default.
KUBEVIRTS = ResourceType("/apis/kubevirt.io/v1", "kubevirts", "KubeVirt")
RESOURCE_TYPES += (VMIS, VMI_MIGRATIONS, KUBEVIRTS)

# metav1.StatusReason for each code (k8s.io/apimachinery/pkg/api/errors/errors.go).
REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
    409: "Conflict", 410: "Expired", 415: "UnsupportedMediaType", 422: "Invalid", 429: "TooManyRequests",
    500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout",
}


def status_body(code: int, message: str, *, reason: str | None = None, details: dict | None = None,
                success: bool = False) -> dict[str, Any]:
    """A metav1.Status, as every error (and an eviction's success) is written on the wire."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Success" if success else "Failure", "code": code}
    if message:
        body["message"] = message
    if not success and reason != "":  # "" means "no reason", as eviction.go's multi-PDB Status has none
        body["reason"] = reason or REASONS.get(code, "Unknown")
    if details:
        body["details"] = details
    return body


class ApiError(Exception):
    """Raised by handlers; the server writes ``body`` with HTTP ``code``."""

    def __init__(self, code: int, message: str, *, reason: str | None = None, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.body = status_body(code, message, reason=reason, details=details)


def not_found(resource: ResourceType, name: str) -> ApiError:
    return ApiError(404, f'{resource.qualified} "{name}" not found',
                    details={"name": name, "kind": resource.plural})


def rfc3339(epoch: float, *, micro: bool = False) -> str:
    moment = datetime.fromtimestamp(epoch, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class StoredEvent:
    rv: int
    resource: ResourceType
    type: str  # ADDED, MODIFIED, DELETED
    obj: dict[str, Any]
    previous: dict[str, Any] | None


class TooOld(Exception):
    def __init__(self, requested: int, oldest: int):
        super().__init__(f"too old resource version: {requested} ({oldest})")


class Store:
    """Objects by resource and (namespace, name), with the watch window and the live subscribers."""

    def __init__(self, *, history: int = 1000, clock: Callable[[], float] = time.time):
        self.clock = clock
        self.revision = 0
        self.oldest_watchable = 0  # a watch may resume from any version >= this
        self._objects: dict[ResourceType, dict[tuple[str, str], dict[str, Any]]] = {r: {} for r in RESOURCE_TYPES}
        self._log: deque[StoredEvent] = deque(maxlen=history)
        self._subscribers: dict[ResourceType, set[asyncio.Queue]] = {r: set() for r in RESOURCE_TYPES}
        self.subscribers_changed = asyncio.Event()
        # Called with every change after it is stored, like a controller's informer (the PDB state uses it).
        self.observers: list[Callable[[StoredEvent], None]] = []

    # ------------------------------------------------------------------ reads
    def get(self, resource: ResourceType, namespace: str, name: str) -> dict[str, Any] | None:
        found = self._objects[resource].get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def list(self, resource: ResourceType, namespace: str | None = None) -> list[dict[str, Any]]:
        return [copy.deepcopy(obj) for (ns, _), obj in sorted(self._objects[resource].items())
                if namespace is None or ns == namespace]

    # ------------------------------------------------------------------ writes
    def create(self, resource: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta["creationTimestamp"] = rfc3339(self.clock())
        meta.setdefault("generation", 1)
        obj["kind"], obj["apiVersion"] = resource.kind, resource.api_version
        return self._write(resource, obj, "ADDED", previous=None)

    def update(self, resource: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        previous = self._objects[resource][(meta.get("namespace", ""), meta["name"])]
        return self._write(resource, obj, "MODIFIED", previous=previous)

    def remove(self, resource: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        previous = self._objects[resource].pop((namespace, name))
        gone = copy.deepcopy(previous)
        self.revision += 1
        # A DELETED event carries the object at its last state with the deletion's resourceVersion (etcd3 store).
        gone["metadata"]["resourceVersion"] = str(self.revision)
        self._record(StoredEvent(self.revision, resource, "DELETED", gone, previous))
        return copy.deepcopy(gone)

    def _write(self, resource: ResourceType, obj: dict[str, Any], kind: str, *, previous: dict | None) -> dict:
        self.revision += 1
        obj["metadata"]["resourceVersion"] = str(self.revision)
        stored = copy.deepcopy(obj)
        meta = stored["metadata"]
        self._objects[resource][(meta.get("namespace", ""), meta["name"])] = stored
        self._record(StoredEvent(self.revision, resource, kind, copy.deepcopy(stored), previous))
        return copy.deepcopy(stored)

    def _record(self, event: StoredEvent) -> None:
        if len(self._log) == self._log.maxlen:
            self.oldest_watchable = self._log[0].rv
        self._log.append(event)
        for queue in self._subscribers[event.resource]:
            queue.put_nowait(event)
        for observer in self.observers:
            observer(event)

    # ------------------------------------------------------------------ watch support
    def expire_history(self) -> None:
        """Forget every past event: a watch must now start from the current revision or get 410."""
        self._log.clear()
        self.oldest_watchable = self.revision

    def subscribe(self, resource: ResourceType, since: int | None) -> tuple[list[StoredEvent], asyncio.Queue]:
        """Past events after ``since`` (None: none) and a queue of future ones, taken atomically."""
        if since is not None and since < self.oldest_watchable:
            raise TooOld(since, self.oldest_watchable)
        backlog = [e for e in self._log if since is not None and e.rv > since and e.resource is resource]
        queue: asyncio.Queue = asyncio.Queue()
        self._subscribers[resource].add(queue)
        self.subscribers_changed.set()
        return backlog, queue

    def unsubscribe(self, resource: ResourceType, queue: asyncio.Queue) -> None:
        self._subscribers[resource].discard(queue)
        self.subscribers_changed.set()

    def watch_count(self, resource: ResourceType | None = None) -> int:
        if resource is not None:
            return len(self._subscribers[resource])
        return sum(len(queues) for queues in self._subscribers.values())

    def broadcast(self, item: object) -> None:
        """Send a control item (bookmark request, drop) to every open watch."""
        for queues in self._subscribers.values():
            for queue in queues:
                queue.put_nowait(item)
