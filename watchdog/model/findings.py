"""What detection believes is wrong, with its evidence: the detection stage's output."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Iterable, Literal, Mapping, NamedTuple

from watchdog.model.pods import PodRef
from watchdog.model.samples import EMPTY

Change = Literal["new", "updated", "resolved"]


class FindingKind(StrEnum):
    INTERFERENCE = "interference"
    # A victim degraded in a domain whose contention is visible (throttle reasons, clock loss) while no neighbour's
    # use is known (an A100 in MIG mode has no GPM): reported so the victim is never lost, never an eviction reason.
    INTERFERENCE_CULPRIT_UNKNOWN = "interference_culprit_unknown"
    MEMORY_PRESSURE = "memory_pressure"
    QUOTA = "quota"  # a configured tenant quota was exceeded, nothing else
    # A MIG instance filled past detection.quota.memory_warning_ratio: no quota is exceeded, so it is only ever
    # reported; when the instance's users do run short, memory_pressure is the finding that may act.
    MIG_MEMORY_WARNING = "mig_memory_warning"
    UNAUTHORIZED = "unauthorized"
    # A process that belongs to no pod on a device the kubelet gave to a pod (docker run --gpus, a host tool, a
    # miner): there is no pod to evict, so it is only ever reported.
    UNAUTHORIZED_HOST = "unauthorized_host"
    XID = "xid"
    # An MPS client at its pinned device-memory limit (the plugin's memory / replicas): its own allocations fail,
    # nobody else's, so it is only ever reported.
    MPS_MEMORY_LIMIT = "mps_memory_limit"


REPORT_ONLY_KINDS: frozenset[FindingKind] = frozenset(
    {FindingKind.MIG_MEMORY_WARNING, FindingKind.INTERFERENCE_CULPRIT_UNKNOWN, FindingKind.UNAUTHORIZED_HOST,
     FindingKind.MPS_MEMORY_LIMIT}
)
"""Kinds that are never an eviction reason, whatever their severity or the policy: the action stage makes no
decision for them and the controller refuses an alert that names one."""


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
    gpu_uuid: str = ""  # the one GPU the finding is about ("" when it spans several, e.g. a tenant on the node)
    mig_uuid: str = ""  # the one MIG device, when the finding is about one

    @property
    def ticks(self) -> int:
        return self.last_tick - self.first_tick + 1


class FindingChange(NamedTuple):
    """A finding that opened, changed materially or resolved between two ticks (compares equal to the plain
    ``(change, finding)`` pair)."""

    change: Change
    finding: Finding


def material(finding: Finding) -> tuple:
    """What makes a finding different enough to tell anyone again: its severity, where it is, who suffers and who
    causes it, and which episode it is. Evidence numbers move every tick and do not count; they are on /metrics."""
    return (
        finding.severity,
        finding.domain,
        finding.resource,
        finding.culprit,
        tuple(sorted(finding.victims, key=lambda ref: (ref.namespace, ref.name, ref.uid, ref.container or ""))),
        finding.tenant,
        finding.first_tick,
    )


def finding_changes(previous: Iterable[Finding], current: Iterable[Finding]) -> tuple[FindingChange, ...]:
    """The one rule for "what changed": new and updated in ``current``'s order, then resolved in ``previous``'s.

    A finding is the same finding while its (kind, key) stays; it is updated when :func:`material` differs. The
    logs, the MQTT stream and anything else that reports changes read these, never a rule of their own.
    """
    before = {(finding.kind, finding.key): finding for finding in previous}
    after = {(finding.kind, finding.key): finding for finding in current}
    result: list[FindingChange] = []
    for identity, finding in after.items():
        old = before.get(identity)
        if old is None:
            result.append(FindingChange("new", finding))
        elif material(old) != material(finding):
            result.append(FindingChange("updated", finding))
    result.extend(FindingChange("resolved", finding) for identity, finding in before.items() if identity not in after)
    return tuple(result)
