"""Scores reported findings against a scenario's truth: precision, recall, latency, overhang and flapping per kind.

Pure (no I/O): it reads report findings (the dicts of docs/report-format.md) and :class:`Truth` labels, so the
scoring rules are table-tested on synthetic findings. A finding matches a truth entry when the kind agrees, the
pods agree (victim/culprit, tenant, pod, or GPU/Xid) and its reported span [reported_tick, last_tick] overlaps the
entry's window [onset, offset + slack]. A finding matching no entry is a false positive; an entry no finding
matches is a miss. Those two give the headline precision and recall *by episodes*.

Overlap alone is lenient: a finding that starts in time and then lingers a hundred ticks after its cause ended
still counts as one true episode, and so does each of three episodes of a flapping finding. So every kind also
reports (docs/evaluation.md): the **overhang** of each true episode (its ticks past the latest offset + slack it
matched), **precision by ticks** (finding ticks inside a matched window over all finding ticks: overhang, ticks
before onset and every tick of a false episode count against it) and **duplicates** (episodes beyond the first
that matched the same truth entry). Latency is ticks from onset to the first matching report, and the same minus
the kind's hysteresis (the ticks detection is configured to wait before it may report at all).

Episode recall also forgives a finding that drops out for most of its window, or comes back as fresh episodes
whose persistence restarts each time, so no eviction ever follows. **Recall by ticks** measures that: per truth
entry, the share of its window's ticks [onset, offset) on which a matching finding was observed and actionable
(CRITICAL; a memory_warning is report-only by definition, so any observed tick of it counts).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from watchdog.evaluation.truth import Truth

# "memory_warning" is the row (and truth label) of the report-only MIG-fill WARNING, finding kind
# "mig_memory_warning"; "culprit_unknown" that of the report-only "interference_culprit_unknown" (see scored_kind).
KINDS = ("interference", "memory_pressure", "quota", "memory_warning", "unauthorized", "xid",
         "culprit_unknown", "unauthorized_host", "mps_memory_limit")
TICK_SCORED_KINDS = frozenset(KINDS) - {"xid"}  # an Xid is an instant: how long its finding stays is report policy
ROWS = {"mig_memory_warning": "memory_warning", "interference_culprit_unknown": "culprit_unknown"}  # kind → row
# tick recall counts any observed tick of these
REPORT_ONLY_KINDS = frozenset({"memory_warning", "culprit_unknown", "unauthorized_host", "mps_memory_limit"})

EpisodeTicks = Mapping[tuple[str, int], Mapping[int, bool]]  # (key, first_tick) → {observed tick: critical}


def scored_kind(finding: Mapping[str, Any]) -> str:
    """The row a finding is scored in: its kind, except where ``ROWS`` names a shorter one."""
    kind = finding["kind"]
    return ROWS.get(kind, kind)


def _window_end(entry: Any, *, slack: int) -> float:
    return math.inf if entry.offset is None else entry.offset + slack


def _overlaps(finding: Mapping[str, Any], *, onset: int, end: float) -> bool:
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
    if scored_kind(finding) != kind:
        return False
    if not _overlaps(finding, onset=entry.onset, end=_window_end(entry, slack=slack)):
        return False
    victims = set(finding.get("victims", ()))
    culprit = finding.get("culprit")
    if kind == "interference":
        return culprit == entry.culprit and bool(victims & entry.all_victims)
    if kind == "culprit_unknown":
        return culprit is None and bool(victims & entry.all_victims)
    if kind == "memory_pressure":
        culprit_ok = entry.culprit is None or culprit == entry.culprit
        return culprit_ok and (not entry.victims or bool(victims & set(entry.victims)))
    if kind == "quota":
        return finding.get("tenant") == entry.tenant
    if kind == "memory_warning" or kind == "mps_memory_limit":
        return culprit == entry.pod
    if kind == "unauthorized":
        return culprit == entry.pod
    if kind == "unauthorized_host":  # no pod: the process is known by its command (and the device's owners)
        evidence = finding.get("evidence", {})
        owners_ok = not entry.victims or bool(victims & set(entry.victims))
        return culprit is None and evidence.get("command") == entry.command and owners_ok
    if kind == "xid":
        return _xid_matches(finding, entry, gpu_uuids=gpu_uuids or {})
    raise ValueError(f"unknown finding kind {kind!r}")


def _span(finding: Mapping[str, Any]) -> tuple[int, int]:
    return finding["reported_tick"], finding["last_tick"]


def true_ticks(finding: Mapping[str, Any], entries: Iterable[Any], *, slack: int) -> int:
    """Ticks of the finding's span that lie inside the union of the windows of the entries it matched."""
    first, last = _span(finding)
    pieces = sorted((max(first, e.onset), min(last, _window_end(e, slack=slack))) for e in entries)
    total, covered_to = 0, first - 1
    for start, end in pieces:
        start = max(start, covered_to + 1)
        if end >= start:
            total += int(end - start + 1)
            covered_to = int(end)
    return total


def overhang(finding: Mapping[str, Any], entries: Iterable[Any], *, slack: int) -> int | None:
    """Ticks the finding stayed past the latest offset + slack it matched; None when a matched entry is open."""
    end = max(_window_end(e, slack=slack) for e in entries)
    return None if end == math.inf else max(0, finding["last_tick"] - int(end))


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
    finding_ticks: int = 0  # ticks spanned by every episode of this kind
    true_finding_ticks: int = 0  # … of which inside a window the episode matched
    overhangs: list[int] = field(default_factory=list)  # one per true episode whose matched entries all closed
    duplicates: int = 0  # episodes beyond the first per detected truth entry (a flapping finding)
    coverages: list[float] = field(default_factory=list)  # per truth entry: share of its window covered

    @property
    def precision(self) -> float | None:
        return self.true_findings / self.findings if self.findings else None

    @property
    def recall(self) -> float | None:
        return self.detected / self.truths if self.truths else None

    @property
    def precision_ticks(self) -> float | None:
        if self.kind not in TICK_SCORED_KINDS or not self.finding_ticks:
            return None
        return self.true_finding_ticks / self.finding_ticks

    @property
    def recall_ticks_median(self) -> float | None:
        return statistics.median(self.coverages) if self.coverages else None

    @property
    def recall_ticks_min(self) -> float | None:
        return min(self.coverages) if self.coverages else None

    @property
    def overhang_median(self) -> float | None:
        return statistics.median(self.overhangs) if self.overhangs else None

    @property
    def overhang_max(self) -> int | None:
        return max(self.overhangs) if self.overhangs else None

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
        self.finding_ticks += other.finding_ticks
        self.true_finding_ticks += other.true_finding_ticks
        self.overhangs.extend(other.overhangs)
        self.duplicates += other.duplicates
        self.coverages.extend(other.coverages)


@dataclass(slots=True)
class Scored:
    """One scenario's scores, with the findings and truths that went wrong (for a person to read)."""

    kinds: dict[str, KindScore]
    false_positives: list[Mapping[str, Any]] = field(default_factory=list)
    misses: list[tuple[str, Any]] = field(default_factory=list)
    overhanging: list[tuple[Mapping[str, Any], int]] = field(default_factory=list)  # (true episode, ticks) > 0
    flapping: list[tuple[str, Any, int]] = field(default_factory=list)  # (kind, entry, episodes) with > 1 episode


def coverage(
    entry: Any, hits: Iterable[Mapping[str, Any]], *, kind: str, episode_ticks: EpisodeTicks, end_tick: int
) -> float | None:
    """Share of the entry's window [onset, offset) (open: to ``end_tick``) on which one of ``hits`` was observed
    and actionable; None when the window lies beyond the run."""
    last = end_tick if entry.offset is None else min(entry.offset - 1, end_tick)
    if last < entry.onset:
        return None
    covered: set[int] = set()
    for finding in hits:
        ticks = episode_ticks.get((finding["key"], finding["first_tick"]), {})
        covered.update(t for t, critical in ticks.items()
                       if entry.onset <= t <= last
                       and (critical or kind in REPORT_ONLY_KINDS or getattr(entry, "report_only", False)))
    return len(covered) / (last - entry.onset + 1)


def _score_kind(
    kind_score: KindScore,
    scored: Scored,
    *,
    findings: list[Mapping[str, Any]],
    entries: tuple[Any, ...],
    slack: int,
    gpu_uuids: Mapping[int, str] | None,
    episode_ticks: EpisodeTicks | None,
    end_tick: int | None,
) -> None:
    kind = kind_score.kind
    kind_score.findings, kind_score.truths = len(findings), len(entries)
    for finding in findings:
        first, last = _span(finding)
        kind_score.finding_ticks += last - first + 1
        matched = [e for e in entries if matches(finding, e, kind=kind, slack=slack, gpu_uuids=gpu_uuids)]
        if not matched:
            scored.false_positives.append(finding)
            continue
        kind_score.true_findings += 1
        kind_score.true_finding_ticks += true_ticks(finding, matched, slack=slack)
        ticks_over = overhang(finding, matched, slack=slack)
        if ticks_over is not None and kind in TICK_SCORED_KINDS:
            kind_score.overhangs.append(ticks_over)
            if ticks_over:
                scored.overhanging.append((finding, ticks_over))
    for entry in entries:
        hits = [f for f in findings if matches(f, entry, kind=kind, slack=slack, gpu_uuids=gpu_uuids)]
        if episode_ticks is not None and end_tick is not None and kind in TICK_SCORED_KINDS:
            share = coverage(entry, hits, kind=kind, episode_ticks=episode_ticks, end_tick=end_tick)
            if share is not None:
                kind_score.coverages.append(share)
        if not hits:
            scored.misses.append((kind, entry))
            continue
        kind_score.detected += 1
        kind_score.latencies.append(max(0, min(f["reported_tick"] for f in hits) - entry.onset))
        if len(hits) > 1:
            kind_score.duplicates += len(hits) - 1
            scored.flapping.append((kind, entry, len(hits)))


def score(
    findings: Iterable[Mapping[str, Any]],
    truth: Truth,
    *,
    hysteresis: Mapping[str, int] | None = None,
    gpu_uuids: Mapping[int, str] | None = None,
    episode_ticks: EpisodeTicks | None = None,
    end_tick: int | None = None,
) -> Scored:
    """Score the report findings of one scenario against its truth.

    Recall by ticks needs what the report folds away, each episode's observed ticks and their severity
    (``episode_ticks``), and the run's last tick (``end_tick``, for windows left open); without them it is not
    measured.
    """
    findings = list(findings)
    hysteresis = hysteresis or {}
    scored = Scored({kind: KindScore(kind, hysteresis=hysteresis.get(kind, 0)) for kind in KINDS})
    for kind in KINDS:
        _score_kind(scored.kinds[kind], scored, findings=[f for f in findings if scored_kind(f) == kind],
                    entries=truth.entries(kind), slack=truth.slack_ticks, gpu_uuids=gpu_uuids,
                    episode_ticks=episode_ticks, end_tick=end_tick)
    return scored
