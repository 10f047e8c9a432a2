"""The agent's running tallies, and the one place a Snapshot is assembled from them.

Counters that outlive a cycle (Xids per GPU instance, errors per stage, policy reloads) live here, touched only on
the event loop thread. Each cycle ends by freezing them into an immutable ``Snapshot``; scrapes render that
snapshot and never see a half-updated state.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

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

STAGES = ("sampling", "events", "attribution", "detection", "action", "publishing")


@dataclass
class AgentState:
    node: str
    tenant_label: str | None = None
    xid_counts: dict[XidKey, tuple[int, float]] = field(default_factory=dict)
    errors: Counter = field(default_factory=Counter)  # (stage, error) → n
    stages: dict[str, StageStatus] = field(default_factory=dict)
    policy_reloads: Counter = field(default_factory=Counter)  # "success" | "failure" → n
    pending_xids: list[XidEvent] = field(default_factory=list)
    ready: bool = False

    def add_xid(self, event: XidEvent) -> None:
        """Called on the loop thread (the watcher thread hands events over with call_soon_threadsafe)."""
        self.pending_xids.append(event)

    def drain_xids(self) -> tuple[XidEvent, ...]:
        events, self.pending_xids = tuple(self.pending_xids), []
        for event in events:
            if not event.xid:
                continue  # ECC or MIG-change events carry no Xid number
            key: XidKey = (event.gpu_index, event.gpu_uuid, event.gpu_instance, event.xid)
            count, _ = self.xid_counts.get(key, (0, 0.0))
            self.xid_counts[key] = (count + 1, event.timestamp)
        return events

    def count_errors(self, stage: str, deltas: Mapping[str, int]) -> None:
        for error, n in deltas.items():
            if n:
                self.errors[(stage, error)] += n

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
    ) -> Snapshot:
        return Snapshot(
            node=self.node,
            sample=sample,
            attribution=attribution,
            findings=findings,
            stages=tuple(self.stages[name] for name in STAGES if name in self.stages),
            xid_counts=MappingProxyType(dict(self.xid_counts)),
            evictions=MappingProxyType(dict(evictions)),
            errors=MappingProxyType(dict(self.errors)),
            mode=mode,
            paused=paused,
            ready=self.ready,
            tenant_label=self.tenant_label,
            policy_reloads=MappingProxyType(dict(self.policy_reloads)),
            mqtt=None if mqtt is None else MappingProxyType(dict(mqtt)),
            kill_switch_known=kill_switch_known,
        )


class CounterDelta:
    """Turns a cumulative counter mapping (a stage's own tallies) into per-cycle increments."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}

    def __call__(self, current: Mapping[str, int]) -> dict[str, int]:
        delta = {k: v - self._last.get(k, 0) for k, v in current.items() if v != self._last.get(k, 0)}
        self._last = dict(current)
        return delta
