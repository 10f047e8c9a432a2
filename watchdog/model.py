"""The values that cross pipeline stages.

Every stage (sampling → attribution → detection → decision → action → publishing) talks to the next one only
through these immutable types, so a stage can be tested, recorded and replayed without the others. Units are
base units throughout: bytes, seconds, watts, hertz for clocks is *not* used (NVML speaks MHz and so do we),
ratios are 0–1. ``None`` always means "not available on this device", never zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Mapping

NOT_ATTRIBUTABLE = 0xFFFFFFFF
"""NVML's marker for 'no GPU/compute instance' in process and event records."""

EMPTY: Mapping = MappingProxyType({})

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
"""Set by the kubelet on the API mirror of a static pod (pkg/kubelet/types): such a pod cannot be evicted."""


# --------------------------------------------------------------------------------------------- sampling


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One process seen on a device by nvmlDeviceGetComputeRunningProcesses (+ ProcessUtilization)."""

    pid: int
    used_memory_bytes: int | None
    gpu_instance: int | None = None  # None when the device is not MIG (NVML's 0xFFFFFFFF)
    compute_instance: int | None = None
    sm_util: float | None = None  # 0–1, only on GPUs not in MIG mode (time-sliced sharing)
    memory_util: float | None = None  # 0–1, share of time the memory controller served this process


@dataclass(frozen=True, slots=True)
class MigSample:
    """One MIG device (a compute instance inside a GPU instance)."""

    uuid: str
    gpu_index: int
    gpu_instance: int
    compute_instance: int
    profile: str  # text after " MIG " in the device name, e.g. "1g.10gb"
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    dram_bw_util: float | None = None  # 0–1, GPM DRAM_BW_UTIL of the GPU instance
    sm_util: float | None = None  # 0–1, GPM SM_UTIL of the compute instance
    sm_occupancy: float | None = None  # 0–1, GPM SM_OCCUPANCY of the compute instance
    processes: tuple[ProcessSample, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One physical GPU, with its MIG devices when MIG is enabled."""

    index: int
    uuid: str
    name: str
    mig_enabled: bool = False
    lost: bool = False  # NVML answered GpuIsLost; every other field is then None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    gpu_util: float | None = None  # 0–1, nvmlDeviceGetUtilizationRates (not in MIG mode)
    memory_util: float | None = None  # 0–1, same call: share of time memory was busy
    dram_bw_util: float | None = None  # 0–1, GPM on the whole GPU (not in MIG mode)
    sm_util: float | None = None  # 0–1, GPM on the whole GPU (not in MIG mode)
    power_watts: float | None = None
    power_limit_watts: float | None = None
    temperature_celsius: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    clock_event_reasons: int | None = None  # nvmlClocksEventReason* bit mask
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    instances: tuple[MigSample, ...] = ()
    processes: tuple[ProcessSample, ...] = ()  # only when not in MIG mode


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One event from nvmlEventSetWait: an Xid (or ECC / MIG-config-change) on a GPU."""

    gpu_index: int
    gpu_uuid: str
    xid: int  # eventData; 0 for non-Xid events
    event_type: int  # nvmlEventType* bit
    timestamp: float  # seconds, from the agent's clock when the event was received
    gpu_instance: int | None = None  # None when NVML said 0xFFFFFFFF (not attributable)
    compute_instance: int | None = None
    recovery_action: int | None = None  # NVML_GPU_RECOVERY_ACTION_* (field 230 / GpuRecoveryAction event), when known


@dataclass(frozen=True, slots=True)
class NodeSample:
    """Everything NVML told us in one tick."""

    node: str
    tick: int
    timestamp: float
    gpus: tuple[GpuSample, ...]
    xids: tuple[XidEvent, ...] = ()  # events received since the previous tick
    driver_version: str | None = None


# ------------------------------------------------------------------------------------------ attribution


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


# -------------------------------------------------------------------------------------------- detection


class FindingKind(StrEnum):
    INTERFERENCE = "interference"
    MEMORY_PRESSURE = "memory_pressure"
    QUOTA = "quota"
    UNAUTHORIZED = "unauthorized"
    XID = "xid"


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing detection believes is wrong, with its evidence.

    ``key`` is stable across ticks for the same situation (kind + domain + culprit …) so hysteresis and logs can
    follow it. ``usage`` gives, per pod key "ns/name", that pod's use of the contended resource (bytes, or a 0–1
    share); ``needed`` is how much must be freed to end the finding (same unit), when that makes sense.
    """

    kind: FindingKind
    key: str
    domain: str  # e.g. "gpu/GPU-…/power", "timeslice/GPU-…", "gi/GPU-…/3", "tenant/ml"
    resource: str  # "power", "sm", "dram", "memory", "pcie", "device", "xid", "instances"
    severity: Severity
    first_tick: int
    last_tick: int
    since: float  # timestamp of first_tick
    victims: tuple[PodRef, ...] = ()
    culprit: PodRef | None = None
    tenant: str | None = None
    evidence: Mapping[str, float | int | str] = field(default_factory=lambda: EMPTY)
    usage: Mapping[str, float] = field(default_factory=lambda: EMPTY)
    needed: float | None = None
    message: str = ""
    observed: bool = True  # False: kept open without fresh evidence this tick; last_tick is the last observed one

    @property
    def ticks(self) -> int:
        return self.last_tick - self.first_tick + 1


# ----------------------------------------------------------------------------------------------- action


class Mode(StrEnum):
    OBSERVE = "observe"
    DRY_RUN = "dry-run"
    ENFORCE = "enforce"


class EvictionResult(StrEnum):
    """Every decision or attempt ends in exactly one of these."""

    EVICTED = "evicted"
    DRY_RUN = "dry_run"  # dry-run request accepted by the API server (PDB would allow it)
    OBSERVED = "observed"  # observe mode: nothing sent
    BLOCKED_PDB = "blocked_pdb"
    BLOCKED = "blocked"  # 2xx with a Failure Status (several PDBs match)
    RATE_LIMITED = "rate_limited"
    COOLDOWN = "cooldown"
    PENDING = "pending"  # finding has not yet persisted for its policy's `for`
    PROTECTED = "protected"
    NOT_LOWER_PRIORITY = "not_lower_priority"
    NOT_ENOUGH = "not_enough"  # no candidate frees enough
    NO_CANDIDATE = "no_candidate"
    ALREADY_EVICTED = "already_evicted"
    PAUSED = "paused"  # kill switch
    UNSAFE = "unsafe"  # attribution unhealthy: never act blind
    GONE = "gone"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class EvictionRequest:
    """What the decision rules ask the evictor to do."""

    pod: PodRef
    priority: int
    finding_key: str
    finding_kind: FindingKind
    reason: str  # short machine word: the finding kind, or "alert"
    protects: tuple[tuple[PodRef, int], ...] = ()  # pods this eviction relieves, with their priorities
    evidence: Mapping[str, float | int | str] = field(default_factory=lambda: EMPTY)
    message: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome for one finding in one cycle: a request to send, or a result that stops here."""

    finding_key: str
    finding_kind: FindingKind
    request: EvictionRequest | None
    result: EvictionResult | None  # None while a request is still to be sent
    reason: str
    namespace: str = ""
    pod: str = ""
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ActionOutcome:
    """What the evictor did with one request."""

    request: EvictionRequest
    result: EvictionResult
    mode: Mode
    timestamp: float
    detail: str = ""
    http_status: int | None = None


# ------------------------------------------------------------------------------------------- publishing


@dataclass(frozen=True, slots=True)
class StageStatus:
    """How one pipeline stage fared in the latest cycle."""

    name: str  # "sampling", "attribution", "detection", "action", "publishing", "events"
    duration_seconds: float
    success: bool
    detail: str = ""


XidKey = tuple[int, str, int | None, int]  # (gpu index, gpu uuid, gpu instance or None, xid)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The agent's state as a scrape sees it: built once per cycle, rendered by every scrape, never mutated."""

    node: str
    sample: NodeSample | None = None
    attribution: Attribution | None = None
    findings: tuple[Finding, ...] = ()
    stages: tuple[StageStatus, ...] = ()
    xid_counts: Mapping[XidKey, tuple[int, float]] = field(default_factory=lambda: EMPTY)  # → (count, last seen)
    evictions: Mapping[tuple[str, str, str], int] = field(default_factory=lambda: EMPTY)  # (result, reason, ns) → n
    errors: Mapping[tuple[str, str], int] = field(default_factory=lambda: EMPTY)  # (stage, error) → n
    mode: Mode = Mode.DRY_RUN
    paused: bool = False
    ready: bool = False
    tenant_label: str | None = None  # pod label key that names the tenant, when configured
    policy_reloads: Mapping[str, int] = field(default_factory=lambda: EMPTY)  # ("success"|"failure") → n
    mqtt: Mapping[str, int] | None = None  # published, dropped, connect_failures, connected; None when off
    kill_switch_known: bool = True  # False until the kill switch was read, or when its last read is stale
