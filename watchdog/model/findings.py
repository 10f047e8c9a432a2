"""What detection believes is wrong, with its evidence: the detection stage's output."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Mapping

from watchdog.model.pods import PodRef
from watchdog.model.samples import EMPTY


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
