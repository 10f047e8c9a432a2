"""The node's pods as the watch last described them, indexed the three ways attribution looks them up.

The kubelet names pods by (namespace, name), cgroups by UID, and a static pod's cgroup by the kubelet's config hash
rather than by its mirror pod's API UID. Keeping one cache fed by the pod watch (ADDED/MODIFIED/DELETED, plus a full
relist after a watch expires) means a tick never asks the API server anything. Pure: no I/O, no clock, no asyncio;
the kube layer feeds it and the service hands ``snapshot()`` to the join.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Iterable, Mapping

from watchdog.model import MIRROR_ANNOTATION, PodInfo

# The kubelet marks a static pod's mirror with its config hash (MIRROR_ANNOTATION), which is also the UID in the
# pod's cgroup path (pkg/kubelet/types/pod_update.go: ConfigMirrorAnnotationKey).

_UPSERT_EVENTS = frozenset({"ADDED", "MODIFIED"})


class PodCache:
    """UID → PodInfo with a (namespace, name) index and a static-pod config-hash index.

    ``snapshot()`` returns a read-only mapping that stays valid (unchanged) after later events: it is rebuilt
    lazily, once per change, not once per tick.
    """

    __slots__ = ("_by_uid", "_by_name", "_by_mirror_hash", "_snapshot")

    def __init__(self, pods: Iterable[PodInfo] = ()) -> None:
        self._by_uid: dict[str, PodInfo] = {}
        self._by_name: dict[tuple[str, str], tuple[str, ...]] = {}
        self._by_mirror_hash: dict[str, str] = {}
        self._snapshot: Mapping[str, PodInfo] | None = None
        self.replace(pods)

    def __len__(self) -> int:
        return len(self._by_uid)

    def apply(self, event_type: str, pod: PodInfo) -> None:
        """Apply one watch event. BOOKMARK carries no pod change; any other unknown type is a caller error."""
        if not isinstance(pod, PodInfo):
            raise TypeError(f"PodCache.apply wants a PodInfo, got {type(pod).__name__}")
        if event_type in _UPSERT_EVENTS:
            self._remove(pod.uid)
            self._insert(pod)
        elif event_type == "DELETED":
            self._remove(pod.uid)
        elif event_type == "BOOKMARK":
            return
        else:
            raise ValueError(f"unknown pod watch event type {event_type!r}; expected ADDED, MODIFIED or DELETED")
        self._snapshot = None

    def replace(self, pods: Iterable[PodInfo]) -> None:
        """Forget everything and hold exactly ``pods`` (a relist after the watch's resourceVersion expired)."""
        self._by_uid = {}
        self._by_name = {}
        self._by_mirror_hash = {}
        for pod in pods:
            if not isinstance(pod, PodInfo):
                raise TypeError(f"PodCache.replace wants PodInfo items, got {type(pod).__name__}")
            self._remove(pod.uid)
            self._insert(pod)
        self._snapshot = None

    def get(self, uid: str) -> PodInfo | None:
        """By API UID, or by the config hash a static pod's cgroup path carries."""
        found = self._by_uid.get(uid)
        if found is None and uid in self._by_mirror_hash:
            found = self._by_uid.get(self._by_mirror_hash[uid])
        return found

    def by_name(self, namespace: str, name: str) -> PodInfo | None:
        """The pod called ``namespace/name``; a live one wins when a recreated pod briefly shares the name."""
        uids = self._by_name.get((namespace, name), ())
        pods = [self._by_uid[uid] for uid in uids]
        live = [pod for pod in pods if pod.live]
        chosen = live or pods
        return chosen[-1] if chosen else None

    def snapshot(self) -> Mapping[str, PodInfo]:
        """A read-only UID → PodInfo mapping that later events do not change."""
        if self._snapshot is None:
            self._snapshot = MappingProxyType(dict(self._by_uid))
        return self._snapshot

    def container_name(self, uid: str, container_id: str | None) -> str | None:
        """The container name for a runtime container ID found in a cgroup path, when the pod status lists it."""
        pod = self.get(uid)
        return container_name_of(pod, container_id) if pod is not None else None

    def _insert(self, pod: PodInfo) -> None:
        self._by_uid[pod.uid] = pod
        key = (pod.namespace, pod.name)
        self._by_name[key] = self._by_name.get(key, ()) + (pod.uid,)
        mirror_hash = pod.annotations.get(MIRROR_ANNOTATION)
        if mirror_hash:
            self._by_mirror_hash[mirror_hash] = pod.uid

    def _remove(self, uid: str) -> None:
        old = self._by_uid.pop(uid, None)
        if old is None:
            return
        key = (old.namespace, old.name)
        remaining = tuple(other for other in self._by_name.get(key, ()) if other != uid)
        if remaining:
            self._by_name[key] = remaining
        else:
            self._by_name.pop(key, None)
        mirror_hash = old.annotations.get(MIRROR_ANNOTATION)
        if mirror_hash and self._by_mirror_hash.get(mirror_hash) == uid:
            del self._by_mirror_hash[mirror_hash]


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
