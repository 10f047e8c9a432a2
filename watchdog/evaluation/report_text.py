"""The replay report as a person reads it, and the difference between two policies' reports on the same trace.

``--report json`` (docs/report-format.md) is for programs; an operator tuning a policy wants one line per finding
episode and one per eviction decision, and — when reviewing a change — only what the change changes. Both are
made from the JSON report, so the two outputs can never disagree.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Sequence

from watchdog.evaluation.replay_policy import label

Report = dict[str, Any]


def plural(count: int, noun: str) -> str:
    """"1 episode", "2 episodes", "0 episodes": the counts a person reads, in the report, eval and plot titles."""
    return f"{count} {noun if count == 1 else noun + 's'}"


def z_score_text(evidence: dict[str, Any]) -> str | None:
    """The interference evidence's z-score for a person: its value, or, where the detector capped it because the
    victim's baseline had no spread (docs/detection.md, evidence ``z_score_capped``), what that means."""
    if evidence.get("z_score") is None:
        return None
    return "baseline flat (σ = 0)" if evidence.get("z_score_capped") else f"z {evidence['z_score']:g}"


def _span(first: int, last: int) -> str:
    return f"tick {first}" if first == last else f"ticks {first}–{last}"


def _finding_cells(finding: dict[str, Any]) -> list[str]:
    victims = ", ".join(finding["victims"]) or "-"
    culprit = finding["culprit"] or "-"
    where = finding["domain"] or finding["resource"] or "-"
    about = "; ".join(filter(None, [_span(finding["first_tick"], finding["last_tick"]),
                                    z_score_text(finding["evidence"])]))
    return [finding["kind"], finding["severity"], where, f"{culprit} → {victims}  ({about})"]


def _eviction_cells(eviction: dict[str, Any]) -> list[str]:
    pod = f"{eviction['namespace']}/{eviction['pod']}" if eviction["pod"] else "-"
    priority = "" if eviction["priority"] is None else f" (priority {eviction['priority']})"
    sent = " sent" if eviction["sent"] else ""
    detail = f" — {eviction['detail']}" if eviction["detail"] else ""
    return ["tick", str(eviction["tick"]), eviction["result"],
            f"{pod}{priority} for {eviction['finding']['kind']}{sent}{detail}"]


def columns(rows: Sequence[Sequence[str]], *, right: frozenset[int] = frozenset(), indent: str = "  ") -> list[str]:
    """``rows`` as lines whose columns line up: each column as wide as its widest cell (the last one unpadded);
    the columns in ``right`` (numbers) aligned to the right."""
    count = max(map(len, rows), default=0)
    widths = [max((len(row[i]) for row in rows if i < len(row)), default=0) for i in range(count)]
    lines = []
    for row in rows:
        cells = [cell if i == len(row) - 1 else cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
                 for i, cell in enumerate(row)]
        lines.append(indent + " ".join(cells))
    return lines


_TICK_COLUMN = frozenset({1})  # the tick number of an eviction row


def format_text(report: Report) -> str:
    """One line per finding episode and per eviction decision, under a line saying what was replayed."""
    trace = report["trace"]
    first = (f"{trace['path']}: node {trace['node']}, {plural(report['ticks'], 'tick')} "
             f"({report['first_tick']}–{report['last_tick']}), mode {report['mode']}")
    if report.get("policy_source"):
        first += f", policy: {label(report['policy_source'])}"
    lines = [first, f"findings: {plural(len(report['findings']), 'episode')}"]
    lines.extend(columns([_finding_cells(finding) for finding in report["findings"]]))
    lines.append(f"eviction decisions: {len(report['evictions'])}")
    lines.extend(columns([_eviction_cells(eviction) for eviction in report["evictions"]], right=_TICK_COLUMN))
    return "\n".join(lines)


def _pair(items_a: Iterable[dict], items_b: Iterable[dict], *, identity, when) -> dict[str, list]:
    """Items of A and B matched by identity, in time order: the n-th of A with the n-th of B."""
    by_a, by_b = defaultdict(list), defaultdict(list)
    for item in items_a:
        by_a[identity(item)].append(item)
    for item in items_b:
        by_b[identity(item)].append(item)
    out: dict[str, list] = {"only_a": [], "only_b": [], "shifted": []}
    for key in {**by_a, **by_b}:
        a, b = sorted(by_a.get(key, []), key=when), sorted(by_b.get(key, []), key=when)
        for left, right in zip(a, b):
            if when(left) != when(right):
                out["shifted"].append((left, right))
        out["only_a"].extend(a[len(b):])
        out["only_b"].extend(b[len(a):])
    for items in out.values():
        items.sort(key=lambda item: when(item[0] if isinstance(item, tuple) else item))
    return out


def compare(report_a: Report, report_b: Report) -> dict[str, dict[str, list]]:
    """What changes from policy A to policy B: findings (episodes, by detector key) and eviction decisions (by
    finding, pod and result) only in A, only in B, and present in both at another tick."""
    return {
        "findings": _pair(report_a["findings"], report_b["findings"], identity=lambda f: (f["kind"], f["key"]),
                          when=lambda f: f["reported_tick"]),
        "evictions": _pair(report_a["evictions"], report_b["evictions"],
                           identity=lambda e: (e["finding"]["key"], e["namespace"], e["pod"], e["result"]),
                           when=lambda e: e["tick"]),
    }


def format_compare(diff: dict[str, dict[str, list]], *, name_a: str, name_b: str) -> str:
    lines = [f"A = {name_a}", f"B = {name_b}"]
    for section, cells, when in (("findings", _finding_cells, "reported_tick"),
                                 ("evictions", _eviction_cells, "tick")):
        parts = diff[section]
        title = "finding episodes" if section == "findings" else "eviction decisions"
        if not any(parts.values()):
            lines.append(f"{title}: no change")
            continue
        lines.append(f"{title}:")
        rows = [["only in A", *cells(item)] for item in parts["only_a"]]
        rows += [["only in B", *cells(item)] for item in parts["only_b"]]
        for a, b in parts["shifted"]:
            row = ["shifted", *cells(b)]
            row[-1] += f"  (A: tick {a[when]}, B: tick {b[when]})"
            rows.append(row)
        right = frozenset(i + 1 for i in _TICK_COLUMN) if section == "evictions" else frozenset()
        lines.extend(columns(rows, right=right))
    return "\n".join(lines)
