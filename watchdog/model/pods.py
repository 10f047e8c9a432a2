"""Who owns what on the node: pods as the watch keeps them, the kubelet's device assignments, one tick's
attribution."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Iterable, Mapping

from watchdog.model.claims import ClaimRef
from watchdog.model.samples import EMPTY, NodeSample
from watchdog.model.sharing import DeviceSharing
from watchdog.model.usage import DeviceUsage, device_usage

if TYPE_CHECKING:
    from watchdog.model.vms import VgpuOwner, VmiInfo

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
"""Set by the kubelet on the API mirror of a static pod (pkg/kubelet/types): such a pod cannot be evicted."""


@dataclass(frozen=True, slots=True)
class PodRef:
    """Enough to name a pod (and, when known, the container)."""

    namespace: str
    name: str
    uid: str = ""
    container: str | None = None
    # "namespace/name", the key every detection map and published series uses: built once, not on each of the
    # ~1 500 reads per tick of a dense node (bench/bench_detection.py). Not compared, hashed or printed.
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")


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
    claim: ClaimRef | None = None  # the ResourceClaim, when the device came through DRA (model.claims)


@dataclass(frozen=True, slots=True)
class PodIndex:
    """The node's pods as one tick looks them up: built once per pod-cache change, frozen, shared by every stage.

    Three ways in, because three sources name a pod differently: the API and the findings by UID, the kubelet by
    namespace/name, and a static pod's cgroup by the kubelet's config hash (MIRROR_ANNOTATION) rather than its
    mirror's API UID. The tenant rule comes with it, for the tenant label the index was built for, so every stage
    counts tenants the same way. Build one with ``PodIndex(pods_by_uid)`` or ``PodIndex.of(pods)``.
    """

    pods: Mapping[str, PodInfo] = field(default_factory=lambda: EMPTY)  # by API UID, read-only
    tenant_label: str | None = None
    _by_name: Mapping[tuple[str, str], PodInfo] = field(init=False, repr=False, compare=False)
    _by_config_hash: Mapping[str, PodInfo] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        label = self.tenant_label
        if label is not None and not (isinstance(label, str) and label):
            raise ValueError(f"tenant_label must be a non-empty label key or None, got {label!r}")
        pods = MappingProxyType(dict(self.pods)) if self.pods else EMPTY
        by_name: dict[tuple[str, str], PodInfo] = {}
        by_config_hash: dict[str, PodInfo] = {}
        for pod in pods.values():
            key = (pod.namespace, pod.name)
            current = by_name.get(key)
            # A recreated pod (StatefulSet) briefly shares its name with its terminating predecessor: the live wins.
            if current is None or (pod.live and not current.live):
                by_name[key] = pod
            config_hash = pod.annotations.get(MIRROR_ANNOTATION)
            if config_hash:
                by_config_hash[config_hash] = pod
        object.__setattr__(self, "pods", pods)
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_by_config_hash", by_config_hash)

    @classmethod
    def of(cls, pods: Iterable[PodInfo] | Mapping[str, PodInfo], *, tenant_label: str | None = None) -> PodIndex:
        """From pods in any order (a mapping's values are taken); a later pod with the same UID replaces an earlier
        one."""
        if isinstance(pods, Mapping):
            pods = pods.values()
        return cls({pod.uid: pod for pod in pods}, tenant_label=tenant_label)

    def __len__(self) -> int:
        return len(self.pods)

    def by_uid(self, uid: str) -> PodInfo | None:
        """By API UID only."""
        return self.pods.get(uid)

    def by_cgroup_uid(self, uid: str) -> PodInfo | None:
        """By the UID a cgroup path carries: the API UID, or for a static pod the kubelet's config hash."""
        found = self.pods.get(uid)
        return found if found is not None else self._by_config_hash.get(uid)

    def by_name(self, namespace: str, name: str) -> PodInfo | None:
        """The pod called ``namespace/name``, a live one before a terminating or finished one of the same name."""
        return self._by_name.get((namespace, name))

    def pod(self, ref: PodRef) -> PodInfo | None:
        """The pod a ref names: by UID when the ref has one (a UID not in the index is None, never a same-name
        replacement), else by namespace/name."""
        if ref.uid:
            return self.pods.get(ref.uid)
        return self._by_name.get((ref.namespace, ref.name))

    def tenant(self, pod: PodInfo) -> str:
        """The pod's tenant under this index's tenant label (``PodInfo.tenant``)."""
        return pod.tenant(self.tenant_label)

    def tenant_of(self, ref: PodRef) -> str:
        """The tenant of the pod a ref names; its namespace when the index does not know the pod (a pod the
        kubelet named while the API was unreadable)."""
        pod = self.pod(ref)
        return pod.tenant(self.tenant_label) if pod is not None else ref.namespace

    def with_tenant_label(self, tenant_label: str | None) -> PodIndex:
        """The same pods under another tenant label (a policy reload changed it); ``self`` when it is the same."""
        return self if tenant_label == self.tenant_label else replace(self, tenant_label=tenant_label)


GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared")
"""The NVIDIA device plugin's whole-GPU resources: a GPU, and a shared GPU renamed under ``renameByDefault``
(k8s-device-plugin README, "Shared Access to GPUs"); MIG devices are ``nvidia.com/mig-<profile>[.shared]``."""
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


def is_gpu_resource(name: str) -> bool:
    """Whether an extended resource name is one of the device plugin's GPUs or MIG devices."""
    return name in GPU_RESOURCES or name.startswith(MIG_RESOURCE_PREFIX)


@dataclass(frozen=True, slots=True)
class HostProcess:
    """A process NVML reports whose cgroup names no pod: a container started by hand (``docker run --gpus``), a host
    tool, a node agent. ``cgroup`` is its path from ``/proc/<pid>/cgroup`` (the v2 line, else the first v1 line),
    ``command`` its ``/proc/<pid>/comm`` (at most 15 characters: the kernel's TASK_COMM_LEN is 16 with the NUL)."""

    cgroup: str
    command: str = ""


@dataclass(frozen=True, slots=True)
class Attribution:
    """Who owns what on this node at one tick.

    ``devices`` maps a GPU or MIG UUID to the live pods the kubelet assigned it to (several on a time-sliced/MPS
    GPU). ``processes`` maps a PID seen by NVML to its pod (from /proc/<pid>/cgroup). ``index`` is the pod cache as
    this tick saw it, with the tenant rule; ``pods`` is its UID map. ``healthy`` is False when the kubelet or the
    API could not be read this tick: downstream stages must then not act on absences (no pod → not
    "unauthorized").
    """

    devices: Mapping[str, tuple[PodRef, ...]] = field(default_factory=lambda: EMPTY)
    processes: Mapping[int, PodRef] = field(default_factory=lambda: EMPTY)
    index: PodIndex = field(default_factory=PodIndex)
    # (device UUID, pod key) → the ResourceClaim that gave the pod the device, for devices allocated through DRA.
    claims: Mapping[tuple[str, str], ClaimRef] = field(default_factory=lambda: EMPTY)
    healthy: bool = True
    kubelet_ok: bool = True
    api_ok: bool = True
    # DRA: whether the ResourceSlice watch is current (None: this node does not watch slices), and how many claimed
    # devices no slice names an NVML UUID for yet, whose processes are held back (never "unauthorized").
    slices_ok: bool | None = None
    claims_held: int = 0
    # PID → what /proc says of a process NVML reports whose cgroup names no pod (never a PID of ``processes``).
    host_processes: Mapping[int, HostProcess] = field(default_factory=lambda: EMPTY)
    # PIDs NVML reports that are node infrastructure, not tenants: the MPS server (by /proc/<pid>/comm). Never in
    # ``processes`` or ``host_processes``, so never summed, blamed or called unauthorized.
    infrastructure: frozenset[int] = frozenset()
    # GPU UUID → how the device plugin shares it (replicas, time-slicing or MPS): absent for a GPU not shared or
    # whose sharing is not known. Detection takes MPS clients' limits from it (model/sharing.py).
    sharing: Mapping[str, DeviceSharing] = field(default_factory=lambda: EMPTY)
    # vGPU UUID → the KubeVirt VMI (and virt-launcher pod) whose VM holds it (model/vms.py); a vGPU whose VM id
    # names no VMI on this node is absent.
    vgpus: Mapping[str, VgpuOwner] = field(default_factory=lambda: EMPTY)
    # VMI uid → the KubeVirt VMI as last listed (model/vms.py): what the action rules read before a virt-launcher
    # pod's eviction, found by the pod's kubevirt.io/created-by label. Empty without KubeVirt.
    vmis: Mapping[str, VmiInfo] = field(default_factory=lambda: EMPTY)
    _usage: tuple[NodeSample, DeviceUsage] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def pods(self) -> Mapping[str, PodInfo]:
        """The pods by API UID (``index.pods``)."""
        return self.index.pods

    def pod(self, ref: PodRef) -> PodInfo | None:
        """The cached pod a ref names (``PodIndex.pod``)."""
        return self.index.pod(ref)

    def usage(self, sample: NodeSample) -> DeviceUsage:
        """Each device's use per (pod, container) in ``sample``, by this attribution's ``processes``
        (model.usage). Summed on the first read and kept, so detection and every scrape of the tick read one sum;
        another sample (a test reusing an attribution) is summed afresh."""
        cached = self._usage
        if cached is None or cached[0] is not sample:
            cached = (sample, device_usage(sample, self.processes, self.infrastructure))
            object.__setattr__(self, "_usage", cached)
        return cached[1]

    def with_tenant_label(self, tenant_label: str | None) -> Attribution:
        """The same attribution with its index under another tenant label; ``self`` when it is the same."""
        if tenant_label == self.index.tenant_label:
            return self
        return replace(self, index=self.index.with_tenant_label(tenant_label))
