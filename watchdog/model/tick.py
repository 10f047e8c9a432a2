"""One tick's outcome as publishing reads it: stage health and the immutable Snapshot every scrape renders."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from watchdog.model.actions import ActionReport, Mode
from watchdog.model.activity import InstanceActivity
from watchdog.model.findings import Finding, FindingChange
from watchdog.model.pods import Attribution
from watchdog.model.samples import EMPTY, NodeSample, XidEvent


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
    policy_reloads: Mapping[str, int] = field(default_factory=lambda: EMPTY)  # ("success"|"failure") → n
    mqtt: Mapping[str, int] | None = None  # published, dropped, connect_failures, connected; None when off
    flight_recorder: Mapping[str, int] | None = None  # bytes_written, ticks_written, dropped, deleted, segments
    kill_switch_known: bool = True  # False until the kill switch was read, or when its last read is stale
    readings_rejected: Mapping[str, int] = field(default_factory=lambda: EMPTY)  # plausibility check → n, cumulative


@dataclass(frozen=True, slots=True)
class TickResult:
    """Everything one cycle produced, carried forward as values.

    Whoever reports on a tick — the MQTT stream, the trace recorder, the logs — reads this, never a diff of two
    snapshots' counters: a counter that went up cannot say which pod was evicted or which compute instance an Xid
    hit. ``snapshot`` is the state a scrape renders after this tick.
    """

    tick: int
    snapshot: Snapshot
    changes: tuple[FindingChange, ...] = ()  # findings opened, materially changed or resolved this tick
    actions: ActionReport = ActionReport()
    xids: tuple[XidEvent, ...] = ()  # events received since the previous tick (Xid, ECC, MIG change)
    signals: Mapping[str, float] | None = None  # the tenants' victim signals detection was given, if any
    activity: Mapping[str, InstanceActivity] | None = None  # per-instance activity borrowed from outside NVML

    @property
    def sample(self) -> NodeSample | None:
        return self.snapshot.sample

    @property
    def attribution(self) -> Attribution | None:
        return self.snapshot.attribution

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self.snapshot.findings
