"""The agent's read-only JSON API on its metrics port: `/api/v1/findings`, `/api/v1/decisions`, `/api/v1/devices`.

Metrics say *how many*; a tenant whose pod was evicted, or an operator deciding whether to switch enforce on, asks
*which* and *why*. The findings come from the snapshot a scrape renders (the same open findings as
`gpu_watchdog_findings`, with their evidence); the decisions are the last results the action stage counted (each
`ActionRecord` behind an increment of `gpu_watchdog_evictions_total`), carried forward from each TickResult by
``DecisionLog`` rather than re-derived; the devices are the latest sample's, with their holders (api_devices).
Each is a document with `apiVersion` and `kind`, described by `api.schema.json` beside this module (docs/api.md);
`?namespace=` and `?pod=` filter findings and decisions, `?limit=` bounds the decisions. Nothing here writes or
calls out: a request reads values already held in memory. Free text (a message, a reason, a detail) may quote
configuration and is cut to ``watchdog.model.text.MAX_SHOWN_CHARACTERS``.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Callable

from aiohttp import web

from watchdog.model import ActionRecord, Finding, PodRef, Snapshot, TickResult
from watchdog.model.text import bounded
from watchdog.publishing.api_devices import API_VERSION, devices_document

DEFAULT_DECISIONS = 500
"""How many decisions the agent keeps in memory (the newest; at most a few hundred bytes each)."""


class DecisionLog:
    """A TickSink keeping the newest ``limit`` counted action results, oldest first, with the tick they ended in."""

    stage = "api"

    def __init__(self, *, limit: int = DEFAULT_DECISIONS) -> None:
        if limit < 1:
            raise ValueError(f"DecisionLog limit must be >= 1, got {limit}")
        self.limit = limit
        self._records: deque[tuple[int, ActionRecord]] = deque(maxlen=limit)

    def tick_done(self, result: TickResult) -> None:
        for record in result.actions.counted:
            self._records.append((result.tick, record))

    def records(self) -> list[tuple[int, ActionRecord]]:
        return list(self._records)


def _pod(ref: PodRef | None) -> dict[str, str] | None:
    if ref is None:
        return None
    return {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid}


def _plain(values: Any) -> dict[str, Any]:
    """A mapping JSON can carry: NaN and infinities (not JSON, RFC 8259 §6) become their names as strings."""
    return {key: str(value) if isinstance(value, float) and not math.isfinite(value) else value
            for key, value in dict(values).items()}


def _names(ref: PodRef | None, *, namespace: str | None, pod: str | None) -> bool:
    return ref is not None and namespace in (None, ref.namespace) and pod in (None, ref.name)


def finding_json(finding: Finding) -> dict[str, Any]:
    return {
        "key": finding.key,
        "kind": str(finding.kind),
        "severity": str(finding.severity),
        "resource": finding.resource,
        "domain": finding.domain,
        "gpuUuid": finding.gpu_uuid,
        "migUuid": finding.mig_uuid,
        "since": finding.since,
        "firstTick": finding.first_tick,
        "lastTick": finding.last_tick,
        "observed": finding.observed,
        "victims": [_pod(victim) for victim in finding.victims],
        "culprit": _pod(finding.culprit),
        "tenant": finding.tenant,
        "message": bounded(finding.message),
        "evidence": _plain(finding.evidence),
        "usage": {key: value for key, value in dict(finding.usage).items() if math.isfinite(value)},
        "needed": finding.needed if finding.needed is None or math.isfinite(finding.needed) else None,
    }


def findings_document(snapshot: Snapshot | None, *, namespace: str | None = None,
                      pod: str | None = None) -> dict[str, Any]:
    """The open findings, each kept when a victim or the culprit matches the filters (all without filters)."""
    findings = snapshot.findings if snapshot is not None else ()
    if namespace is not None or pod is not None:
        findings = tuple(f for f in findings if _names(f.culprit, namespace=namespace, pod=pod)
                         or any(_names(v, namespace=namespace, pod=pod) for v in f.victims))
    sample = snapshot.sample if snapshot is not None else None
    return {
        "apiVersion": API_VERSION,
        "kind": "FindingList",
        "node": snapshot.node if snapshot is not None else "",
        "mode": str(snapshot.mode) if snapshot is not None else "",
        "tick": sample.tick if sample is not None else None,
        "timestamp": sample.timestamp if sample is not None else None,
        "items": [finding_json(finding) for finding in findings],
    }


def decision_json(tick: int, record: ActionRecord) -> dict[str, Any]:
    return {
        "tick": tick,
        "timestamp": record.timestamp,
        "result": str(record.result),
        "reason": bounded(record.reason),
        "mode": str(record.mode),
        "pod": {"namespace": record.namespace, "name": record.pod, "uid": record.uid} if record.pod else None,
        "namespace": record.namespace,
        "findingKey": record.finding_key,
        "findingKind": str(record.finding_kind),
        "detail": bounded(record.detail),
        "httpStatus": record.http_status,
    }


def decisions_document(records: list[tuple[int, ActionRecord]], *, node: str, limit: int,
                       namespace: str | None = None, pod: str | None = None) -> dict[str, Any]:
    """The newest ``limit`` decisions matching the filters, newest first."""
    kept = [(tick, record) for tick, record in records
            if namespace in (None, record.namespace) and pod in (None, record.pod)]
    return {
        "apiVersion": API_VERSION,
        "kind": "DecisionList",
        "node": node,
        "items": [decision_json(tick, record) for tick, record in reversed(kept[-limit:])],
    }


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"apiVersion": API_VERSION, "kind": "Status", "code": status, "message": message},
                             status=status)


class JsonApi:
    """The aiohttp routes of the API, reading the latest snapshot and the decision log."""

    def __init__(self, *, snapshot_provider: Callable[[], Snapshot | None], decisions: DecisionLog) -> None:
        self._snapshot_provider = snapshot_provider
        self._decisions = decisions

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/api/v1/findings", self.findings)
        app.router.add_get("/api/v1/decisions", self.decisions)
        app.router.add_get("/api/v1/devices", self.devices)

    @staticmethod
    def _filters(request: web.Request) -> tuple[str | None, str | None]:
        return request.query.get("namespace") or None, request.query.get("pod") or None

    async def findings(self, request: web.Request) -> web.Response:
        namespace, pod = self._filters(request)
        return web.json_response(findings_document(self._snapshot_provider(), namespace=namespace, pod=pod))

    async def devices(self, request: web.Request) -> web.Response:
        return web.json_response(devices_document(self._snapshot_provider()))

    async def decisions(self, request: web.Request) -> web.Response:
        namespace, pod = self._filters(request)
        raw = request.query.get("limit", str(self._decisions.limit))
        if not raw.isdigit() or not 1 <= int(raw) <= self._decisions.limit:
            return _error(400, f"limit must be an integer from 1 to {self._decisions.limit}, got {raw!r}")
        snapshot = self._snapshot_provider()
        return web.json_response(decisions_document(self._decisions.records(), limit=int(raw), namespace=namespace,
                                                    pod=pod, node=snapshot.node if snapshot is not None else ""))
