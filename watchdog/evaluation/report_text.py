"""The replay report as a person reads it, and the difference between two policies' reports on the same trace.

``--report json`` (docs/report-format.md) is for programs; an operator tuning a policy wants one line per finding
episode and one per eviction decision, and — when reviewing a change — only what the change changes. Both are
made from the JSON report, so the two outputs can never disagree.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

Report = dict[str, Any]


def _finding_line(finding: dict[str, Any]) -> str:
    victims = ", ".join(finding["victims"]) or "-"
    culprit = finding["culprit"] or "-"
    span = f"ticks {finding['first_tick']}–{finding['last_tick']}"
    where = finding["domain"] or finding["resource"] or "-"
    return f"{finding['kind']:<18} {finding['severity']:<8} {where:<28} {culprit} → {victims}  ({span})"


def _eviction_line(eviction: dict[str, Any]) -> str:
    pod = f"{eviction['namespace']}/{eviction['pod']}" if eviction["pod"] else "-"
    priority = "" if eviction["priority"] is None else f" (priority {eviction['priority']})"
    sent = " sent" if eviction["sent"] else ""
    detail = f" — {eviction['detail']}" if eviction["detail"] else ""
    return (f"tick {eviction['tick']:>6}  {eviction['result']:<13} {pod}{priority} for {eviction['finding']['kind']}"
            f"{sent}{detail}")


def format_text(report: Report) -> str:
    """One line per finding episode and per eviction decision, under a line saying what was replayed."""
    trace = report["trace"]
    lines = [f"{trace['path']}: node {trace['node']}, {report['ticks']} ticks "
             f"({report['first_tick']}–{report['last_tick']}), mode {report['mode']}"]
    lines.append(f"findings: {len(report['findings'])} episodes")
    lines.extend(f"  {_finding_line(finding)}" for finding in report["findings"])
    lines.append(f"eviction decisions: {len(report['evictions'])}")
    lines.extend(f"  {_eviction_line(eviction)}" for eviction in report["evictions"])
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
    for section, render, when in (("findings", _finding_line, "reported_tick"),
                                  ("evictions", _eviction_line, "tick")):
        parts = diff[section]
        label = "finding episodes" if section == "findings" else "eviction decisions"
        if not any(parts.values()):
            lines.append(f"{label}: no change")
            continue
        lines.append(f"{label}:")
        lines.extend(f"  only in A  {render(item)}" for item in parts["only_a"])
        lines.extend(f"  only in B  {render(item)}" for item in parts["only_b"])
        lines.extend(f"  shifted    {render(b)}  (A: tick {a[when]}, B: tick {b[when]})" for a, b in parts["shifted"])
    return "\n".join(lines)
