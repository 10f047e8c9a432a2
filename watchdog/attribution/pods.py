"""The node's pods as the watch last described them, handed to each tick as one frozen ``PodIndex``.

The kubelet names pods by (namespace, name), cgroups by UID, and a static pod's cgroup by the kubelet's config hash
rather than by its mirror pod's API UID. Keeping one cache fed by the pod watch (ADDED/MODIFIED/DELETED, plus a full
relist after a watch expires) means a tick never asks the API server anything, and building its index once per
change (not once per tick, not once per stage) means every stage looks pods up the same way. Pure: no I/O, no
clock, no asyncio; the kube layer feeds it and the service hands ``index()`` to the join.
"""

from __future__ import annotations

from typing import Iterable

from watchdog.model import MIRROR_ANNOTATION, PodIndex, PodInfo

# The kubelet marks a static pod's mirror with its config hash (MIRROR_ANNOTATION), which is also the UID in the
# pod's cgroup path (pkg/kubelet/types/pod_update.go: ConfigMirrorAnnotationKey). PodIndex keeps that lookup.
__all__ = ["MIRROR_ANNOTATION", "PodCache", "container_name_of"]

_UPSERT_EVENTS = frozenset({"ADDED", "MODIFIED"})


class PodCache:
    """UID → PodInfo, kept by watch events; ``index(tenant_label)`` hands out the frozen lookups.

    The index is built lazily, once per change (or per tenant-label change), and the same object is handed out
    until then, so a tick costs nothing while the pods stay as they are. An index handed out never changes.
    """

    __slots__ = ("_by_uid", "_index")

    def __init__(self, pods: Iterable[PodInfo] = ()) -> None:
        self._by_uid: dict[str, PodInfo] = {}
        self._index: PodIndex | None = None
        self.replace(pods)

    def __len__(self) -> int:
        return len(self._by_uid)

    def apply(self, event_type: str, pod: PodInfo) -> None:
        """Apply one watch event. BOOKMARK carries no pod change; any other unknown type is a caller error."""
        if not isinstance(pod, PodInfo):
            raise TypeError(f"PodCache.apply wants a PodInfo, got {type(pod).__name__}")
        if event_type in _UPSERT_EVENTS:
            self._by_uid.pop(pod.uid, None)  # re-inserted last: the newest state of a pod comes last
            self._by_uid[pod.uid] = pod
        elif event_type == "DELETED":
            self._by_uid.pop(pod.uid, None)
        elif event_type == "BOOKMARK":
            return
        else:
            raise ValueError(f"unknown pod watch event type {event_type!r}; expected ADDED, MODIFIED or DELETED")
        self._index = None

    def replace(self, pods: Iterable[PodInfo]) -> None:
        """Forget everything and hold exactly ``pods`` (a relist after the watch's resourceVersion expired)."""
        by_uid: dict[str, PodInfo] = {}
        for pod in pods:
            if not isinstance(pod, PodInfo):
                raise TypeError(f"PodCache.replace wants PodInfo items, got {type(pod).__name__}")
            by_uid.pop(pod.uid, None)
            by_uid[pod.uid] = pod
        self._by_uid = by_uid
        self._index = None

    def index(self, tenant_label: str | None = None) -> PodIndex:
        """The pods as they are now, frozen and indexed, with the tenant rule for ``tenant_label``; the same object
        until the next change (a policy reload that changes the label makes a new one)."""
        index = self._index
        if index is None:
            index = self._index = PodIndex(self._by_uid, tenant_label=tenant_label)
        elif index.tenant_label != tenant_label:
            index = self._index = index.with_tenant_label(tenant_label)
        return index

    def get(self, uid: str) -> PodInfo | None:
        """By API UID, or by the config hash a static pod's cgroup path carries."""
        return self._current().by_cgroup_uid(uid)

    def by_name(self, namespace: str, name: str) -> PodInfo | None:
        """The pod called ``namespace/name``; a live one wins when a recreated pod briefly shares the name."""
        return self._current().by_name(namespace, name)

    def container_name(self, uid: str, container_id: str | None) -> str | None:
        """The container name for a runtime container ID found in a cgroup path, when the pod status lists it."""
        pod = self.get(uid)
        return container_name_of(pod, container_id) if pod is not None else None

    def _current(self) -> PodIndex:
        """The index as it is, whatever its tenant label (lookups by UID and name do not depend on it)."""
        return self._index if self._index is not None else self.index()


def container_name_of(pod: PodInfo, container_id: str | None) -> str | None:
    """Match a cgroup's container ID against the pod status's IDs (which may be the runtime's full or short form)."""
    if not container_id:
        return None
    for container in pod.containers:
        known = container.container_id
        if known and "://" in known:  # tolerate an unstripped "containerd://<id>" from the pod status
            known = known.split("://", 1)[1]
        if known and (known == container_id or known.startswith(container_id) or container_id.startswith(known)):
            return container.name
    return None
