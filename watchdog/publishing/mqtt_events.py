"""One tick's results as MQTT events: the pure half of the MQTT stream.

Prometheus shows state; an event stream shows *changes*, so a consumer (a ticketing bridge, a fleet console) gets
one message when a finding opens, changes or resolves, when an eviction result is counted (naming the pod), when an
Xid arrives (with its GPU and compute instance and the driver's recovery action), and when the agent's own status
moves. The events are read from the cycle's ``TickResult`` as values, never guessed from counters that went up;
which finding change is material is ``model.finding_changes``'s one rule. Pure: no asyncio, no sockets, no clock
(timestamps come from the sample).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from watchdog.model import ActionRecord, Finding, PodRef, Snapshot, TickResult, XidEvent

SCHEMA_VERSION = 1

Event = tuple[str, dict[str, Any], bool]
"""(topic suffix below the prefix, JSON-able payload, retain flag)."""

# MQTT 3.1.1 §4.7.1: '+' and '#' are wildcards, '/' separates levels, and §4.7.3 forbids U+0000 in a topic name.
_TOPIC_UNSAFE = str.maketrans({"+": "_", "#": "_", "/": "_", "\x00": "_"})


def topic_segment(text: str) -> str:
    """One topic level made from outside text (a node or kind name): wildcards and separators become '_'."""
    cleaned = str(text).translate(_TOPIC_UNSAFE)
    return cleaned or "_"


def events_for(result: TickResult, *, previous: Snapshot | None, now: float | None = None) -> list[Event]:
    """The events of one tick. ``previous`` is the snapshot of the tick before (None: the agent just started); only
    the retained status is compared with it, since status is a state, not an event.

    Topic suffixes are ``<node>/findings/<kind>``, ``<node>/actions``, ``<node>/xid`` and ``<node>/status``; the
    publisher puts its prefix in front. ``now`` stamps payloads when the tick carries no sample.
    """
    current = result.snapshot
    node = topic_segment(current.node)
    header = _header(current, now=now)
    events: list[Event] = [
        _finding_event(finding, change=change, node=node, header=header) for change, finding in result.changes
    ]
    action_totals = _running_totals(
        [(r.result.value, r.reason, r.namespace) for r in result.actions.counted], current.evictions)
    events.extend(_action_event(record, total, node=node, header=header)
                  for record, total in zip(result.actions.counted, action_totals))
    xids = [event for event in result.xids if event.xid]
    xid_totals = _running_totals([(e.gpu_index, e.gpu_uuid, e.gpu_instance, e.xid) for e in xids],
                                 {key: count for key, (count, _) in current.xid_counts.items()})
    events.extend(_xid_event(event, total, node=node, header=header) for event, total in zip(xids, xid_totals))
    status = status_payload(current, header=header)
    if previous is None or _status_state(previous) != _status_state(current):
        events.append((f"{node}/status", status, True))
    return events


def status_payload(snapshot: Snapshot, *, header: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The retained ``<node>/status`` message of a running agent."""
    return {
        **(header if header is not None else _header(snapshot, now=None)),
        "state": "online",
        "mode": str(snapshot.mode),
        "paused": snapshot.paused,
        "ready": snapshot.ready,
        "stages": {stage.name: {"success": stage.success, "detail": stage.detail} for stage in snapshot.stages},
    }


def offline_payload(node: str, *, timestamp: float | None) -> dict[str, Any]:
    """The status of an agent that stopped (timestamp set) or died (the broker's will message: no timestamp)."""
    return {"schema": SCHEMA_VERSION, "node": node, "tick": None, "timestamp": timestamp, "state": "offline"}


def _header(snapshot: Snapshot, *, now: float | None) -> dict[str, Any]:
    sample = snapshot.sample
    return {
        "schema": SCHEMA_VERSION,
        "node": snapshot.node,
        "tick": sample.tick if sample is not None else None,
        "timestamp": sample.timestamp if sample is not None else now,
    }


def _status_state(snapshot: Snapshot) -> tuple:
    return (
        snapshot.mode,
        snapshot.paused,
        snapshot.ready,
        tuple((stage.name, stage.success) for stage in snapshot.stages),
    )


# ------------------------------------------------------------------------------------------------ findings


def _finding_event(finding: Finding, *, change: str, node: str, header: Mapping[str, Any]) -> Event:
    payload = {
        **header,
        "event": change,
        "kind": str(finding.kind),
        "key": finding.key,
        "domain": finding.domain,
        "resource": finding.resource,
        "severity": str(finding.severity),
        "first_tick": finding.first_tick,
        "last_tick": finding.last_tick,
        "since": _number(finding.since),
        "victims": [_pod(ref) for ref in finding.victims],
        "culprit": _pod(finding.culprit) if finding.culprit is not None else None,
        "tenant": finding.tenant,
        "gpu_uuid": finding.gpu_uuid or None,
        "mig_uuid": finding.mig_uuid or None,
        "evidence": {str(k): _number(v) if not isinstance(v, str) else v for k, v in finding.evidence.items()},
        "usage": {str(k): _number(v) for k, v in finding.usage.items()},
        "needed": _number(finding.needed),
        "message": finding.message,
    }
    return (f"{node}/findings/{topic_segment(str(finding.kind))}", payload, False)


def _pod(ref: PodRef) -> dict[str, Any]:
    return {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid, "container": ref.container}


def _number(value: float | int | None) -> float | int | None:
    """JSON (RFC 8259 §6) has no NaN or Infinity; Python's json would write them anyway, so they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# ------------------------------------------------------------------------------------------ actions, xids


def _running_totals(keys: list, totals: Mapping) -> list[int]:
    """Each key's count as of its own event: the tick's final total less the same-key events after it."""
    remaining: dict = {}
    for key in keys:
        remaining[key] = remaining.get(key, 0) + 1
    running = []
    for key in keys:
        remaining[key] -= 1
        running.append(max(1, totals.get(key, 0) - remaining[key]))
    return running


def _action_event(record: ActionRecord, total: int, *, node: str, header: Mapping[str, Any]) -> Event:
    payload = {
        **header,
        "result": record.result.value,
        "reason": record.reason,
        "namespace": record.namespace,
        "pod": record.pod or None,
        "uid": record.uid or None,
        "finding": record.finding_key,
        "finding_kind": str(record.finding_kind),
        "mode": str(record.mode),
        "detail": record.detail,
        "http_status": record.http_status,
        "count": 1,
        "total": total,
    }
    return (f"{node}/actions", payload, False)


def _xid_event(event: XidEvent, total: int, *, node: str, header: Mapping[str, Any]) -> Event:
    payload = {
        **header,
        "gpu": event.gpu_index,
        "gpu_uuid": event.gpu_uuid,
        "gpu_instance": event.gpu_instance,
        "compute_instance": event.compute_instance,
        "xid": event.xid,
        "recovery_action": event.recovery_action,
        "count": 1,
        "total": total,
        "last_seen": _number(event.timestamp),
    }
    return (f"{node}/xid", payload, False)
