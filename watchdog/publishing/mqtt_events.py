"""What changed between two snapshots, as MQTT events: the pure half of the MQTT stream.

Prometheus shows state; an event stream shows *changes*, so a consumer (a ticketing bridge, a fleet console) gets
one message when a finding opens, changes or resolves, when an eviction is counted, when an Xid arrives, and when
the agent's own status moves. Diffing two immutable Snapshots here, without I/O, keeps the broker client thin and
lets every rule be table-tested. Pure: no asyncio, no sockets, no clock (timestamps come from the sample).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from watchdog.model import Finding, PodRef, Snapshot

SCHEMA_VERSION = 1

Event = tuple[str, dict[str, Any], bool]
"""(topic suffix below the prefix, JSON-able payload, retain flag)."""

# MQTT 3.1.1 §4.7.1: '+' and '#' are wildcards, '/' separates levels, and §4.7.3 forbids U+0000 in a topic name.
_TOPIC_UNSAFE = str.maketrans({"+": "_", "#": "_", "/": "_", "\x00": "_"})

# A finding is "updated" when one of these changes; its evidence numbers move every tick and would turn the
# stream into a per-tick feed, which is what /metrics is for.
_MATERIAL_FIELDS = ("severity", "domain", "resource", "victims", "culprit", "tenant")


def topic_segment(text: str) -> str:
    """One topic level made from outside text (a node or kind name): wildcards and separators become '_'."""
    cleaned = str(text).translate(_TOPIC_UNSAFE)
    return cleaned or "_"


def events_for(previous: Snapshot | None, current: Snapshot, *, now: float | None = None) -> list[Event]:
    """The events that turn ``previous`` into ``current``; ``previous`` None means "the agent just started".

    Topic suffixes are ``<node>/findings/<kind>``, ``<node>/actions``, ``<node>/xid`` and ``<node>/status``; the
    publisher puts its prefix in front. ``now`` stamps payloads when ``current`` carries no sample.
    """
    node = topic_segment(current.node)
    header = _header(current, now=now)
    events: list[Event] = []
    events.extend(_finding_events(previous, current, node=node, header=header))
    events.extend(_action_events(previous, current, node=node, header=header))
    events.extend(_xid_events(previous, current, node=node, header=header))
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


def _finding_events(
    previous: Snapshot | None, current: Snapshot, *, node: str, header: Mapping[str, Any]
) -> list[Event]:
    before = {(f.kind, f.key): f for f in previous.findings} if previous is not None else {}
    now = {(f.kind, f.key): f for f in current.findings}
    events: list[Event] = []
    for identity, finding in now.items():
        old = before.get(identity)
        if old is None:
            change = "new"
        elif any(getattr(old, name) != getattr(finding, name) for name in _MATERIAL_FIELDS):
            change = "updated"
        else:
            continue
        events.append(_finding_event(finding, change=change, node=node, header=header))
    for identity, finding in before.items():
        if identity not in now:
            events.append(_finding_event(finding, change="resolved", node=node, header=header))
    return events


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


def _increase(before: int, after: int) -> int:
    """Counter increase; a smaller value means the counter restarted, so all of it is new (as Prometheus reads it)."""
    return after - before if after >= before else after


def _action_events(
    previous: Snapshot | None, current: Snapshot, *, node: str, header: Mapping[str, Any]
) -> list[Event]:
    before = previous.evictions if previous is not None else {}
    events: list[Event] = []
    for (result, reason, namespace), total in sorted(current.evictions.items()):
        increase = _increase(before.get((result, reason, namespace), 0), total)
        if increase > 0:
            payload = {
                **header,
                "result": result,
                "reason": reason,
                "namespace": namespace,
                "count": increase,
                "total": total,
            }
            events.append((f"{node}/actions", payload, False))
    return events


def _xid_events(previous: Snapshot | None, current: Snapshot, *, node: str, header: Mapping[str, Any]) -> list[Event]:
    before = previous.xid_counts if previous is not None else {}
    events: list[Event] = []
    for key in sorted(current.xid_counts, key=lambda k: (k[0], k[1], -1 if k[2] is None else k[2], k[3])):
        gpu_index, gpu_uuid, gpu_instance, xid = key
        total, last_seen = current.xid_counts[key]
        increase = _increase(before[key][0] if key in before else 0, total)
        if increase > 0:
            payload = {
                **header,
                "gpu": gpu_index,
                "gpu_uuid": gpu_uuid,
                "gpu_instance": gpu_instance,
                "xid": xid,
                "count": increase,
                "total": total,
                "last_seen": _number(last_seen),
            }
            events.append((f"{node}/xid", payload, False))
    return events
