"""The agent's running tallies, and the one place a Snapshot is assembled from them.

What outlives a cycle (Xids per GPU instance, stage health, policy reloads) lives here, touched only on the event
loop thread. Errors have one representation: cumulative counts per (stage, error). The cycle counts what it sees
itself (a timeout, a stage that raised); a stage that keeps its own tallies (the sampler, the /proc reader, the
Xid watcher, the victim-signal client, the kill switch) is registered once as an error source and read as it is
when the snapshot is frozen. Each cycle ends by freezing all of it into an immutable ``Snapshot``; scrapes render
that snapshot and never see a half-updated state.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping

from watchdog.model import (
    Attribution,
    Finding,
    Mode,
    NodeSample,
    Snapshot,
    StageStatus,
    XidEvent,
    XidKey,
)

STAGES = ("sampling", "events", "attribution", "detection", "action", "trace")

ErrorSource = Callable[[], Mapping[str, int]]
"""A stage's own cumulative error counts, error name → n."""


# Events kept for the next sample while NVML gives none (a GPU hung): enough for any real burst, bounded.
PENDING_XIDS = 10_000

@dataclass
class AgentState:
    node: str
    xid_counts: dict[XidKey, tuple[int, float]] = field(default_factory=dict)
    errors: Counter = field(default_factory=Counter)  # (stage, error) → n, counted by the cycle itself
    stages: dict[str, StageStatus] = field(default_factory=dict)
    policy_reloads: Counter = field(default_factory=Counter)  # "success" | "failure" → n
    pending_xids: list[XidEvent] = field(default_factory=list)
    ready: bool = False
    readings_rejected: Counter = field(default_factory=Counter)  # plausibility check → readings refused, cumulative
    _error_sources: list[tuple[str, ErrorSource]] = field(default_factory=list)

    def add_error_source(self, stage: str, source: ErrorSource) -> None:
        self._error_sources.append((stage, source))

    def add_xid(self, event: XidEvent) -> None:
        """Called on the loop thread (the watcher thread hands events over with call_soon_threadsafe)."""
        self.pending_xids.append(event)

    def drain_xids(self) -> tuple[XidEvent, ...]:
        """The events received since the last drain, uncounted: they pass the plausibility gate with the tick's
        sample first (an Xid on an absent GPU or past 2^16 is refused there), then `count_xids` counts them."""
        events, self.pending_xids = tuple(self.pending_xids), []
        return events

    def keep_xids(self, events: tuple[XidEvent, ...]) -> None:
        """Events drained in a cycle without a sample: judged with the next one (at most PENDING_XIDS kept)."""
        self.pending_xids[:0] = events
        overflow = len(self.pending_xids) - PENDING_XIDS
        if overflow > 0:
            del self.pending_xids[:overflow]
            self.count_error("events", "dropped", overflow)

    def count_rejections(self, sample: NodeSample) -> None:
        """The readings the plausibility gate refused in the tick's final sample, counted once per tick."""
        self.readings_rejected.update(rejection.check for rejection in sample.rejected)

    def count_xids(self, events: tuple[XidEvent, ...]) -> None:
        """Admitted events with an Xid number, counted per GPU instance."""
        for event in events:
            if not event.xid:
                continue  # ECC or MIG-change events carry no Xid number
            key: XidKey = (event.gpu_index, event.gpu_uuid, event.gpu_instance, event.xid)
            count, _ = self.xid_counts.get(key, (0, 0.0))
            self.xid_counts[key] = (count + 1, event.timestamp)

    def count_error(self, stage: str, error: str, n: int = 1) -> None:
        self.errors[(stage, error)] += n

    def error_totals(self) -> dict[tuple[str, str], int]:
        """Every error so far: the cycle's own counts plus each source's, as the source has them now."""
        totals = Counter(self.errors)
        for stage, source in self._error_sources:
            for error, n in source().items():
                if n:
                    totals[(stage, error)] += n
        return dict(totals)

    def stage_done(self, name: str, *, seconds: float, success: bool, detail: str = "") -> None:
        self.stages[name] = StageStatus(name=name, duration_seconds=seconds, success=success, detail=detail)

    def snapshot(
        self,
        *,
        sample: NodeSample | None,
        attribution: Attribution | None,
        findings: tuple[Finding, ...],
        evictions: Mapping[tuple[str, str, str], int],
        mode: Mode,
        paused: bool,
        mqtt: Mapping[str, int] | None = None,
        kill_switch_known: bool = True,
        flight_recorder: Mapping[str, int] | None = None,
    ) -> Snapshot:
        return Snapshot(
            node=self.node,
            sample=sample,
            attribution=attribution,
            findings=findings,
            stages=tuple(self.stages[name] for name in STAGES if name in self.stages),
            xid_counts=MappingProxyType(dict(self.xid_counts)),
            evictions=MappingProxyType(dict(evictions)),
            errors=MappingProxyType(self.error_totals()),
            mode=mode,
            paused=paused,
            ready=self.ready,
            policy_reloads=MappingProxyType(dict(self.policy_reloads)),
            mqtt=None if mqtt is None else MappingProxyType(dict(mqtt)),
            flight_recorder=None if flight_recorder is None else MappingProxyType(dict(flight_recorder)),
            kill_switch_known=kill_switch_known,
            readings_rejected=MappingProxyType(dict(self.readings_rejected)),
        )
