"""Alertmanager webhook payloads: validate them, pick the alerts that ask for an eviction, and remember which
ones were handled so a redelivery never evicts twice.

Alertmanager re-sends a group on every `repeat_interval` and on retries after a 5xx, with the same alert
fingerprint and startsAt (the Alertmanager docs, configuration, <webhook_config>, give the payload), so
(fingerprint, startsAt) is the identity of "one firing of one alert". An eviction alert also says where: the agent
judges every finding per node, so `node` (and `gpu_uuid` / `mig_uuid` when the finding is about one device) is read
here and the selection acts only there (selection.py). PURE: no I/O, no asyncio.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping

from watchdog.controller.names import namespace_problem, pod_name_problem
from watchdog.model import EMPTY, FindingKind

ACTION_LABEL = "gpu_watchdog_action"
KIND_LABEL = "gpu_watchdog_kind"
NODE_LABEL = "node"  # the agent's own label on every series (watchdog/publishing/catalogue.py)
GPU_UUID_LABEL = "gpu_uuid"
MIG_UUID_LABEL = "mig_uuid"
SUPPORTED_VERSION = "4"
MAX_INTEGER_DIGITS = 100


class WebhookError(ValueError):
    """A payload we refuse; `reason` is what the 400 answer says."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class AlertTarget:
    """One firing alert that asks for an eviction: of `pod`, or (pod None) of the tenant's lowest GPU pod, on `node`
    ("" when the alert does not say, which the controller refuses) and, when given, on that device."""

    fingerprint: str
    starts_at: str
    alertname: str
    namespace: str
    pod: str | None
    kind: FindingKind
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    summary: str = ""
    node: str = ""
    gpu_uuid: str = ""
    mig_uuid: str = ""

    @property
    def device(self) -> str:
        """The MIG device, else the GPU, the alert is about; "" when it names none."""
        return self.mig_uuid or self.gpu_uuid

    @property
    def dedupe_key(self) -> tuple[str, str]:
        return (self.fingerprint, self.starts_at)

    @property
    def finding_key(self) -> str:
        return f"alert/{self.alertname}/{self.fingerprint}"

    @property
    def started(self) -> float:
        """startsAt in epoch seconds: pods created later are not what this firing is about."""
        started = rfc3339_seconds(self.starts_at)
        if started is None:
            raise WebhookError(f"startsAt {self.starts_at!r} is not an RFC 3339 time")
        return started


def rfc3339_seconds(text: str) -> float | None:
    """Epoch seconds of an RFC 3339 time as Alertmanager writes it (Go's RFC3339Nano: up to nine fraction digits,
    "Z" or an offset); None when it is not one. Python 3.11's fromisoformat reads the nanoseconds (truncated to
    microseconds) and "Z", but also accepts zone-less and date-only forms, which RFC 3339 does not."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if "T" not in text.upper() or moment.tzinfo is None:
        return None
    return moment.timestamp()


def parse_payload(body: bytes | str) -> dict[str, Any]:
    """Decode and validate an Alertmanager webhook body (version "4")."""
    try:
        payload = json.loads(body, parse_constant=_no_constant, parse_float=_finite_float, parse_int=_short_int)
    except RecursionError:  # Python's json recurses once per level: a body of 100k "[" ends here
        raise WebhookError("body is nested too deeply to be an Alertmanager payload") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, and the refusals below
        raise WebhookError(f"body is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise WebhookError("body must be a JSON object")
    version = payload.get("version")
    if version != SUPPORTED_VERSION:
        raise WebhookError(f"unsupported webhook version {version!r}; expected {SUPPORTED_VERSION!r}")
    alerts = payload.get("alerts")
    if not isinstance(alerts, list):
        raise WebhookError("'alerts' must be a list")
    for index, alert in enumerate(alerts):
        _check_alert(alert, index)
    return payload


def _no_constant(literal: str) -> Any:
    raise ValueError(f"{literal} is not a JSON number (RFC 8259 section 6)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # "1e400" overflows to inf
        raise ValueError(f"{text} is not a finite number")
    return value


def _short_int(text: str) -> int:
    # CPython refuses to convert more than 4,300 digits (sys.set_int_max_str_digits); nothing in a payload needs 20.
    if len(text) > MAX_INTEGER_DIGITS:
        raise ValueError(f"an integer of {len(text)} characters is too large")
    return int(text)


def _check_names(labels: Mapping[str, str], where: str) -> None:
    """Refuse a namespace or pod label the API server could never accept: 400 now, not 503 for ever after."""
    problems = [("namespace", namespace_problem(labels.get("namespace", "")))]
    if labels.get("pod"):
        problems.append(("pod", pod_name_problem(labels["pod"])))
    for label, problem in problems:
        if problem is not None:
            raise WebhookError(f"{where}.labels.{label} {labels[label][:80]!r} {problem}")


def _check_alert(alert: Any, index: int) -> None:
    where = f"alerts[{index}]"
    if not isinstance(alert, dict):
        raise WebhookError(f"{where} must be an object")
    if alert.get("status") not in ("firing", "resolved"):
        raise WebhookError(f"{where}.status must be 'firing' or 'resolved'")
    for name in ("labels", "annotations"):
        value = alert.get(name, {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise WebhookError(f"{where}.{name} must map strings to strings")
    for name in ("fingerprint", "startsAt"):
        if not isinstance(alert.get(name), str) or not alert[name]:
            raise WebhookError(f"{where}.{name} must be a non-empty string")
    if rfc3339_seconds(alert["startsAt"]) is None:
        raise WebhookError(f"{where}.startsAt must be an RFC 3339 time, got {alert['startsAt']!r}")


def select_targets(payload: Mapping[str, Any]) -> tuple[list[AlertTarget], list[str]]:
    """Firing alerts labelled gpu_watchdog_action="evict" with a namespace; plus why each other alert was skipped.
    Raises WebhookError when such an alert's namespace or pod label cannot be a Kubernetes name."""
    targets: list[AlertTarget] = []
    skipped: list[str] = []
    for index, alert in enumerate(payload.get("alerts", [])):
        labels: Mapping[str, str] = alert.get("labels", {})
        name = labels.get("alertname", "")
        if alert["status"] != "firing":
            skipped.append(f"{name}: resolved")
            continue
        if labels.get(ACTION_LABEL) != "evict":
            skipped.append(f"{name}: no {ACTION_LABEL}=\"evict\" label")
            continue
        namespace = labels.get("namespace", "")
        if not namespace:
            skipped.append(f"{name}: no namespace label")
            continue
        _check_names(labels, f"alerts[{index}]")
        try:
            kind = FindingKind(labels.get(KIND_LABEL, FindingKind.QUOTA.value))
        except ValueError:
            kind = FindingKind.QUOTA
        targets.append(
            AlertTarget(
                fingerprint=alert["fingerprint"],
                starts_at=alert["startsAt"],
                alertname=name,
                namespace=namespace,
                pod=labels.get("pod") or None,
                kind=kind,
                labels=dict(labels),
                summary=alert.get("annotations", {}).get("summary", ""),
                node=labels.get(NODE_LABEL, ""),
                gpu_uuid=labels.get(GPU_UUID_LABEL, ""),
                mig_uuid=labels.get(MIG_UUID_LABEL, ""),
            )
        )
    return targets, skipped


class Deduper:
    """Remembers the most recent `capacity` handled (fingerprint, startsAt) keys."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._capacity = capacity
        self._seen: OrderedDict[tuple[str, str], str] = OrderedDict()

    def seen(self, key: tuple[str, str]) -> str | None:
        """The result recorded for this key, or None if it was never handled."""
        return self._seen.get(key)

    def remember(self, key: tuple[str, str], result: str) -> None:
        self._seen[key] = result
        self._seen.move_to_end(key)
        while len(self._seen) > self._capacity:
            self._seen.popitem(last=False)

    def __len__(self) -> int:
        return len(self._seen)
