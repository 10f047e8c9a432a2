"""Scores reported findings against a scenario's truth: precision, recall and detection latency per kind.

Pure (no I/O): it reads report findings (the dicts of docs/report-format.md) and :class:`Truth` labels, so the
scoring rules are table-tested on synthetic findings. A finding matches a truth entry when the kind agrees, the
pods agree (victim/culprit, tenant, pod, or GPU/Xid) and its reported span [reported_tick, last_tick] overlaps the
entry's [onset, offset + slack]. A finding matching no entry is a false positive; an entry no finding matches is a
miss. Latency is ticks from onset to the first matching report, and the same minus the kind's hysteresis (the
ticks detection is configured to wait before it may report at all).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from watchdog.evaluation.truth import Truth

KINDS = ("interference", "memory_pressure", "quota", "unauthorized", "xid")


def _overlaps(finding: Mapping[str, Any], *, onset: int, offset: int | None, slack: int) -> bool:
    end = math.inf if offset is None else offset + slack
    return finding["reported_tick"] <= end and finding["last_tick"] >= onset


def _evidence_int(finding: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = finding.get("evidence", {}).get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value)
    return None


def _xid_matches(finding: Mapping[str, Any], entry: Any, *, gpu_uuids: Mapping[int, str]) -> bool:
    # entry.instance is the GPU instance *id* here: evaluation resolves the scenario's mig-list index beforehand.
    xid = _evidence_int(finding, "xid")
    if xid is not None and xid != entry.xid:
        return False
    gpu = _evidence_int(finding, "gpu_index", "gpu")
    if gpu is not None:
        if gpu != entry.gpu:
            return False
    elif entry.gpu in gpu_uuids and gpu_uuids[entry.gpu] not in finding.get("domain", ""):
        return False
    instance = _evidence_int(finding, "gpu_instance", "instance")
    return entry.instance is None or instance is None or instance == entry.instance


def matches(
    finding: Mapping[str, Any], entry: Any, *, kind: str, slack: int, gpu_uuids: Mapping[int, str] | None = None
) -> bool:
    """Whether one report finding is the detection of one truth entry of ``kind``."""
    if finding["kind"] != kind:
        return False
    if not _overlaps(finding, onset=entry.onset, offset=entry.offset, slack=slack):
        return False
    victims = set(finding.get("victims", ()))
    culprit = finding.get("culprit")
    if kind == "interference":
        return culprit == entry.culprit and bool(victims & entry.all_victims)
    if kind == "memory_pressure":
        culprit_ok = entry.culprit is None or culprit == entry.culprit
        return culprit_ok and (not entry.victims or bool(victims & set(entry.victims)))
    if kind == "quota":
        return finding.get("tenant") == entry.tenant
    if kind == "unauthorized":
        return culprit == entry.pod
    if kind == "xid":
        return _xid_matches(finding, entry, gpu_uuids=gpu_uuids or {})
    raise ValueError(f"unknown finding kind {kind!r}")


@dataclass(slots=True)
class KindScore:
    """Counts for one kind, over one scenario or summed over a suite."""

    kind: str
    findings: int = 0
    true_findings: int = 0
    truths: int = 0
    detected: int = 0
    latencies: list[int] = field(default_factory=list)
    hysteresis: int = 0

    @property
    def precision(self) -> float | None:
        return self.true_findings / self.findings if self.findings else None

    @property
    def recall(self) -> float | None:
        return self.detected / self.truths if self.truths else None

    @property
    def latency_median(self) -> float | None:
        return statistics.median(self.latencies) if self.latencies else None

    @property
    def latency_max(self) -> int | None:
        return max(self.latencies) if self.latencies else None

    @property
    def latency_median_after_hysteresis(self) -> float | None:
        median = self.latency_median
        return None if median is None else median - self.hysteresis

    def merge(self, other: KindScore) -> None:
        self.findings += other.findings
        self.true_findings += other.true_findings
        self.truths += other.truths
        self.detected += other.detected
        self.latencies.extend(other.latencies)
        self.hysteresis = max(self.hysteresis, other.hysteresis)


@dataclass(slots=True)
class Scored:
    """One scenario's scores, with the findings and truths that went wrong (for a person to read)."""

    kinds: dict[str, KindScore]
    false_positives: list[Mapping[str, Any]] = field(default_factory=list)
    misses: list[tuple[str, Any]] = field(default_factory=list)


def score(
    findings: Iterable[Mapping[str, Any]],
    truth: Truth,
    *,
    hysteresis: Mapping[str, int] | None = None,
    gpu_uuids: Mapping[int, str] | None = None,
) -> Scored:
    """Score the report findings of one scenario against its truth."""
    findings = list(findings)
    hysteresis = hysteresis or {}
    scored = Scored({kind: KindScore(kind, hysteresis=hysteresis.get(kind, 0)) for kind in KINDS})
    for kind in KINDS:
        entries = truth.entries(kind)
        of_kind = [f for f in findings if f["kind"] == kind]
        kind_score = scored.kinds[kind]
        kind_score.findings, kind_score.truths = len(of_kind), len(entries)
        for finding in of_kind:
            hit = any(matches(finding, e, kind=kind, slack=truth.slack_ticks, gpu_uuids=gpu_uuids) for e in entries)
            kind_score.true_findings += hit
            if not hit:
                scored.false_positives.append(finding)
        for entry in entries:
            hits = [f for f in of_kind if matches(f, entry, kind=kind, slack=truth.slack_ticks, gpu_uuids=gpu_uuids)]
            if not hits:
                scored.misses.append((kind, entry))
                continue
            kind_score.detected += 1
            kind_score.latencies.append(max(0, min(f["reported_tick"] for f in hits) - entry.onset))
    return scored
