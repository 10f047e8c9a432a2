"""Who owns what on the node: pods as the watch keeps them, the kubelet's device assignments, one tick's
attribution."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from watchdog.model.samples import EMPTY

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
"""Set by the kubelet on the API mirror of a static pod (pkg/kubelet/types): such a pod cannot be evicted."""


@dataclass(frozen=True, slots=True)
class PodRef:
    """Enough to name a pod (and, when known, the container)."""

    namespace: str
    name: str
    uid: str = ""
    container: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ContainerInfo:
    name: str
    container_id: str | None = None  # runtime ID without the "containerd://" scheme


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What the pod watch keeps per pod: the facts detection and eviction decide on."""

    uid: str
    namespace: str
    name: str
    node: str = ""
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    annotations: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    priority: int = 0
    priority_class: str = ""
    qos_class: str = ""
    owner_kind: str | None = None  # "DaemonSet", "ReplicaSet", "Node" (static/mirror) …
    mirror: bool = False  # static pod mirrored by the kubelet
    phase: str = "Running"
    deleting: bool = False  # metadata.deletionTimestamp is set
    created: float = 0.0  # epoch seconds of metadata.creationTimestamp
    containers: tuple[ContainerInfo, ...] = ()
    gpu_memory_request_bytes: int | None = None  # from a configured resource/annotation, if any
    gpu_resources: tuple[str, ...] = ()  # extended resources requested: "nvidia.com/gpu", "nvidia.com/mig-1g.10gb" …

    @property
    def ref(self) -> PodRef:
        return PodRef(self.namespace, self.name, self.uid)

    @property
    def live(self) -> bool:
        return not self.deleting and self.phase not in ("Succeeded", "Failed")

    def tenant(self, tenant_label: str | None) -> str:
        """The tenant, as every stage counts it: the ``tenant_label`` value when configured and set, else the
        namespace."""
        if tenant_label:
            value = self.labels.get(tenant_label)
            if value:
                return value
        return self.namespace


@dataclass(frozen=True, slots=True)
class DeviceAssignment:
    """One device the kubelet says it gave a container (PodResources List)."""

    device_id: str  # GPU or MIG UUID, the "::n" replica suffix stripped
    resource: str  # e.g. "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"
    namespace: str
    pod: str
    container: str
    replica: int | None = None  # n of "<uuid>::<n>" (time-slicing / MPS)


@dataclass(frozen=True, slots=True)
class Attribution:
    """Who owns what on this node at one tick.

    ``devices`` maps a GPU or MIG UUID to the live pods the kubelet assigned it to (several on a time-sliced/MPS
    GPU). ``processes`` maps a PID seen by NVML to its pod (from /proc/<pid>/cgroup). ``pods`` is the pod cache by
    UID. ``healthy`` is False when the kubelet or the API could not be read this tick: downstream stages must then
    not act on absences (no pod → not "unauthorized").
    """

    devices: Mapping[str, tuple[PodRef, ...]] = field(default_factory=lambda: EMPTY)
    processes: Mapping[int, PodRef] = field(default_factory=lambda: EMPTY)
    pods: Mapping[str, PodInfo] = field(default_factory=lambda: EMPTY)
    healthy: bool = True
    kubelet_ok: bool = True
    api_ok: bool = True

    def pod(self, ref: PodRef) -> PodInfo | None:
        """The cached pod a ref names: by UID when the ref has one (a UID not in the cache is None, never a
        same-name replacement), else by namespace/name."""
        if ref.uid:
            return self.pods.get(ref.uid)
        for info in self.pods.values():
            if info.namespace == ref.namespace and info.name == ref.name:
                return info
        return None
