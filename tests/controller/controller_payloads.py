"""Alertmanager webhook payloads as Alertmanager 0.25 sends them (Alertmanager docs, configuration, webhook_config)."""

from __future__ import annotations

import json

NOT_ENDED = "0001-01-01T00:00:00Z"


def alert(
    *,
    namespace: str | None = "team-b",
    pod: str | None = "batch",
    status: str = "firing",
    action: str | None = "evict",
    fingerprint: str = "f00d",
    starts_at: str = "2026-11-30T10:00:00Z",
    name: str = "GpuWatchdogQuotaBreach",
    kind: str | None = None,
    node: str | None = "node-1",  # where controller_fakes.gpu_pod and FakeApiServer.add_pod put pods by default
    gpu_uuid: str | None = None,
    mig_uuid: str | None = None,
) -> dict:
    labels = {"alertname": name}
    if namespace:
        labels["namespace"] = namespace
    for label, value in (("node", node), ("gpu_uuid", gpu_uuid), ("mig_uuid", mig_uuid)):
        if value:
            labels[label] = value
    if pod:
        labels["pod"] = pod
    if action:
        labels["gpu_watchdog_action"] = action
    if kind:
        labels["gpu_watchdog_kind"] = kind
    return {
        "status": status,
        "labels": labels,
        "annotations": {"summary": f"{name} in {namespace}"},
        "startsAt": starts_at,
        "endsAt": NOT_ENDED if status == "firing" else "2026-11-30T10:05:00Z",
        "generatorURL": "http://prometheus/graph",
        "fingerprint": fingerprint,
    }


def payload(*alerts: dict, version: str = "4") -> dict:
    return {
        "receiver": "gpu-watchdog",
        "status": "firing" if any(a["status"] == "firing" for a in alerts) else "resolved",
        "alerts": list(alerts),
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "version": version,
        "groupKey": '{}:{alertname="GpuWatchdogQuotaBreach"}',
        "truncatedAlerts": 0,
    }


def body(*alerts: dict, version: str = "4") -> bytes:
    return json.dumps(payload(*alerts, version=version)).encode()
