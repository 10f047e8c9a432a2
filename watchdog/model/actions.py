"""What the decision rules ask for and what the evictor did: the action stage's vocabulary."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Mapping

from watchdog.model.findings import FindingKind
from watchdog.model.pods import PodRef
from watchdog.model.samples import EMPTY


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
    BLOCKED = "blocked"  # 2xx with a Failure Status (several PDBs match), an admission policy or KubeVirt refused
    MIGRATING = "migrating"  # a virt-launcher pod's eviction became a live migration of its VM (KubeVirt)
    RATE_LIMITED = "rate_limited"
    COOLDOWN = "cooldown"
    PENDING = "pending"  # finding has not yet persisted for its policy's `for`
    PROTECTED = "protected"
    NOT_LOWER_PRIORITY = "not_lower_priority"
    NOT_ENOUGH = "not_enough"  # no candidate frees enough
    NO_CANDIDATE = "no_candidate"
    ALREADY_EVICTED = "already_evicted"
    VM_MIGRATING = "vm_migrating"  # the pod's VM is being live-migrated already: it is leaving
    VM_NOT_MIGRATABLE = "vm_not_migratable"  # evicting the pod would stop its VM (no migration), and policy says no
    VM_PASSTHROUGH = "vm_passthrough"  # the VM holds a whole GPU by passthrough: reported, never evicted by default
    PAUSED = "paused"  # kill switch
    UNSAFE = "unsafe"  # attribution unhealthy: never act blind
    GONE = "gone"
    STALE = "stale"  # the send came too long after its finding (max_decision_age_seconds): dropped, never sent
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
    node: str = ""  # the node the decision is about, when the decider does not run there (the controller's alerts)


@dataclass(frozen=True, slots=True)
class ActionOutcome:
    """What the evictor did with one request."""

    request: EvictionRequest
    result: EvictionResult
    mode: Mode
    timestamp: float
    detail: str = ""
    http_status: int | None = None


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """One result the action stage counted this tick (one increment of gpu_watchdog_evictions_total), with the pod
    and finding it was about. Standing refusals repeated tick after tick are counted once, and so appear once."""

    result: EvictionResult
    reason: str  # the finding kind, or "alert"
    namespace: str
    pod: str  # "" when the decision named no pod (no candidate)
    finding_key: str
    finding_kind: FindingKind
    mode: Mode
    timestamp: float
    detail: str = ""
    uid: str = ""
    http_status: int | None = None


@dataclass(frozen=True, slots=True)
class ActionReport:
    """What one action cycle did: the outcomes of the requests it handled and every result it counted."""

    outcomes: tuple[ActionOutcome, ...] = ()
    counted: tuple[ActionRecord, ...] = ()
