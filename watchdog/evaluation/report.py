"""Folds tick-by-tick findings and decisions into the report `gpu-watchdog replay` prints.

A finding is re-emitted every tick it stands and a standing finding yields the same "pending" or "cooldown"
decision every tick; a person reading a report wants episodes and changes instead. So findings are grouped into
episodes (the detector's key + first tick), and decisions are reported once per change of result for a
(finding, pod) pair, with PENDING (still in hysteresis) never reported. The shape is docs/report-format.md and
``report.schema.json`` next to this module.
"""

from __future__ import annotations

from collections import Counter

import json
import math
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from watchdog.evaluation.stages import StepResult, sent_key
from watchdog.model import Decision, EvictionResult, Finding, PodRef, Severity

REPORT_FORMAT = "gpu-watchdog-report"
REPORT_VERSION = 1
_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


@cache
def report_schema() -> dict[str, Any]:
    """The report JSON Schema (one copy, in this package; docs/report.schema.json links to it)."""
    return json.loads(resources.files("watchdog.evaluation").joinpath("report.schema.json").read_text("utf-8"))


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass(slots=True)
class Episode:
    """One finding key from its first tick to the last tick the detector emitted it."""

    first: Finding
    reported_tick: int
    last: Finding
    last_reported_tick: int = 0
    ticks_reported: int = 1
    victims: dict[str, None] = field(default_factory=dict)
    severity: Severity = Severity.INFO

    @classmethod
    def start(cls, finding: Finding, *, tick: int) -> Episode:
        episode = cls(first=finding, reported_tick=tick, last=finding, last_reported_tick=tick)
        episode._absorb(finding)
        return episode

    def add(self, finding: Finding, *, tick: int) -> None:
        self.last, self.last_reported_tick = finding, tick
        self.ticks_reported += 1
        self._absorb(finding)

    def _absorb(self, finding: Finding) -> None:
        self.victims.update(dict.fromkeys(ref.key for ref in finding.victims))
        if _SEVERITY_RANK[finding.severity] > _SEVERITY_RANK[self.severity]:
            self.severity = finding.severity

    def to_json(self) -> dict[str, Any]:
        last = self.last
        return {
            "kind": last.kind.value,
            "key": last.key,
            "domain": last.domain,
            "resource": last.resource,
            "tenant": last.tenant,
            "first_tick": self.first.first_tick,
            "reported_tick": self.reported_tick,
            "last_tick": self.last_reported_tick,
            "ticks_reported": self.ticks_reported,
            "victims": list(self.victims),
            "culprit": last.culprit.key if last.culprit else None,
            "severity": self.severity.value,
            "evidence": {key: _plain(value) for key, value in last.evidence.items()},
            "message": last.message,
        }


def _protects(decision: Decision) -> list[dict[str, Any]]:
    if decision.request is None:
        return []
    return [{"namespace": ref.namespace, "pod": ref.name, "priority": prio} for ref, prio in decision.request.protects]


class ReportBuilder:
    """Accumulates :class:`StepResult` ticks into a report dict."""

    def __init__(self, *, source: dict[str, Any], mode: str, policy_source: str | None = None) -> None:
        self._source, self._mode = source, mode
        self._policy_source = policy_source  # None: not said (the evaluation's reports)
        self._policy_changes: list[dict[str, Any]] = []
        self._ticks = 0
        self._first_tick: int | None = None
        self._last_tick: int | None = None
        self._episodes: dict[tuple[str, int], Episode] = {}
        self._last_result: dict[tuple[str, str], EvictionResult] = {}
        self._evictions: list[dict[str, Any]] = []
        self._rejected: Counter[str] = Counter()
        self._quarantined_ticks = 0

    def policy_changed(self, *, tick: int, path: str) -> None:
        """From ``tick`` on, the ticks are replayed under the policy recorded in the segment ``path``."""
        self._policy_changes.append({"tick": tick, "path": path})

    def add(self, step: StepResult) -> None:
        tick = step.sample.tick
        self._ticks += 1
        self._rejected.update(rejection.check for rejection in step.sample.rejected)
        self._quarantined_ticks += bool(step.sample.quarantined)
        self._first_tick = tick if self._first_tick is None else self._first_tick
        self._last_tick = tick
        for finding in step.findings:
            episode_key = (finding.key, finding.first_tick)
            episode = self._episodes.get(episode_key)
            if episode is None:
                self._episodes[episode_key] = Episode.start(finding, tick=tick)
            else:
                episode.add(finding, tick=tick)
        for decision in step.decisions:
            self._decision(step, decision)

    def _decision(self, step: StepResult, decision: Decision) -> None:
        result = decision.result
        if result is None or result is EvictionResult.PENDING:
            return
        pair = (decision.finding_key, f"{decision.namespace}/{decision.pod}")
        if self._last_result.get(pair) is result:
            return
        self._last_result[pair] = result
        priority = decision.request.priority if decision.request else None
        if priority is None and decision.pod:
            info = step.attribution.pod(PodRef(decision.namespace, decision.pod))
            priority = info.priority if info else None
        self._evictions.append(
            {
                "tick": step.sample.tick,
                "namespace": decision.namespace or None,
                "pod": decision.pod or None,
                "priority": priority,
                "finding": {"kind": decision.finding_kind.value, "key": decision.finding_key},
                "protects": _protects(decision),
                "result": result.value,
                "sent": sent_key(decision) in step.sent,
                "detail": decision.detail,
            }
        )

    def finish(self) -> dict[str, Any]:
        findings = sorted(self._episodes.values(), key=lambda e: (e.reported_tick, e.last.key))
        said = {} if self._policy_source is None else {"policy_source": self._policy_source}
        if self._policy_changes:
            said["policy_changes"] = self._policy_changes
        return {
            "format": REPORT_FORMAT,
            "version": REPORT_VERSION,
            "trace": self._source,
            "mode": self._mode,
            **said,
            "ticks": self._ticks,
            "first_tick": self._first_tick,
            "last_tick": self._last_tick,
            "findings": [episode.to_json() for episode in findings],
            "evictions": self._evictions,
            "readings_rejected": dict(sorted(self._rejected.items())),
            "quarantined_ticks": self._quarantined_ticks,
        }
