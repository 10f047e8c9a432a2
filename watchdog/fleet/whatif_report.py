"""The fleet what-if report: per node what `replay --compare` prints, and the sums an operator decides on.

A policy change is rolled out to every node, so the question is asked of every node and answered once: how many
eviction decisions and finding episodes appear only under the candidate policy (P), only under the policy in force,
or at another tick; which pods and tenants (namespaces) they fall on; and which nodes could not answer. Each node's
own section is ``format_compare`` of its agent's result, the table `gpu-watchdog replay --compare` prints, so one
table is learned once. The JSON form keeps the agents' result objects as they sent them.

In every agent result ``a`` is the report under the recorded policy and ``b`` under the posted one, so "only in B"
of ``compare`` is "only under P".
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

from watchdog.evaluation.replay_policy import label
from watchdog.evaluation.report_text import columns, format_compare, plural
from watchdog.fleet.whatif import ANSWERED, SCHEMA, NodeOutcome

_PARTS = (("only_b", "only under P"), ("only_a", "only under the current policy"), ("shifted", "shifted"))
_SECTIONS = (("evictions", "eviction decisions"), ("findings", "finding episodes"))
TOP = 10


def _counts(diff: dict[str, dict[str, list]]) -> dict[str, dict[str, int]]:
    return {section: {part: len(diff[section][part]) for part, _ in _PARTS} for section, _ in _SECTIONS}


def _pods_of(section: str, item: dict[str, Any]) -> Iterable[str]:
    if section == "evictions":
        if item.get("pod"):
            yield f"{item['namespace']}/{item['pod']}"
        return
    names = {name for name in [item.get("culprit"), *(item.get("victims") or ())] if name}
    yield from sorted(names)


def affected(outcomes: list[NodeOutcome]) -> dict[str, list[dict[str, Any]]]:
    """Pods and tenants (namespaces) by how many changed decisions and episodes name them, most first."""
    pods: Counter[str] = Counter()
    evictions: Counter[str] = Counter()
    for outcome in outcomes:
        diff = (outcome.result or {}).get("diff")
        for section, _ in _SECTIONS if diff else ():
            for part, _ in _PARTS:
                for item in diff[section][part]:
                    item = item[1] if isinstance(item, (list, tuple)) else item  # shifted: (a, b)
                    for pod in _pods_of(section, item):
                        pods[pod] += 1
                        if section == "evictions":
                            evictions[pod] += 1
    tenants: Counter[str] = Counter()
    tenant_evictions: Counter[str] = Counter()
    for pod, count in pods.items():
        tenants[pod.partition("/")[0]] += count
        tenant_evictions[pod.partition("/")[0]] += evictions[pod]
    return {
        "pods": [{"pod": pod, "changes": n, "evictions": evictions[pod]} for pod, n in _ranked(pods)],
        "tenants": [{"namespace": ns, "changes": n, "evictions": tenant_evictions[ns]} for ns, n in _ranked(tenants)],
    }


def _ranked(counter: Counter[str]) -> list[tuple[str, int]]:
    return sorted(counter.items(), key=lambda pair: (-pair[1], pair[0]))[:TOP]


def check(outcomes: list[NodeOutcome]) -> None:
    """A node whose result this report cannot read is failed, with what is wrong, not a crash of the whole report:
    each result is read here as ``build`` and ``format_fleet`` read it."""
    for outcome in outcomes:
        result = outcome.result
        if result is None:
            continue
        try:
            _counts(result["diff"])
            affected([outcome])
            label(result["a"].get("policy_source", "trace"))
            format_compare(result["diff"], name_a="A", name_b="B")
        except (KeyError, TypeError, AttributeError, ValueError, IndexError) as exc:
            outcome.state, outcome.reason = "failed", f"{SCHEMA}: result: {type(exc).__name__}: {exc}"


def build(outcomes: list[NodeOutcome], *, policy: str, window: dict[str, Any]) -> dict[str, Any]:
    """The JSON report: each node with its agent's answer, the totals over the nodes with a result, failures."""
    totals = {section: {part: 0 for part, _ in _PARTS} for section, _ in _SECTIONS}
    for outcome in outcomes:
        diff = (outcome.result or {}).get("diff")
        for section, parts in (_counts(diff).items() if diff else ()):
            for part, n in parts.items():
                totals[section][part] += n
    return {
        "policy": policy,
        "window": window,
        "nodes": [{"node": o.node, "pod": o.pod, "url": o.url, "state": o.state, "reason": o.reason,
                   "seconds": round(o.seconds, 3), "answer": o.answer} for o in outcomes],
        "totals": totals,
        "most_affected": affected(outcomes),
        "failed": [{"node": o.node, "pod": o.pod, "state": o.state, "reason": o.reason}
                   for o in outcomes if o.state != ANSWERED],
    }


def _count_cells(counts: dict[str, dict[str, int]]) -> list[list[str]]:
    return [[title, *(str(counts[section][part]) for part, _ in _PARTS)] for section, title in _SECTIONS]


def _table(rows: list[list[str]], *, right: frozenset[int]) -> list[str]:
    """``columns`` with its last column aligned too (it leaves the last cell unpadded)."""
    return [line.rstrip() for line in columns([[*row, ""] for row in rows], right=right)]


def format_fleet(report: dict[str, Any], outcomes: list[NodeOutcome]) -> str:
    """The text report: totals, per-node counts, most affected pods and tenants, failed nodes, then each node's
    `replay --compare` table."""
    answered = [o for o in outcomes if o.result is not None]
    lines = [f"what-if: {report['policy']} (P) against the policy in force, on "
             f"{plural(len(outcomes), 'node')}: {len(answered)} with a result, {len(report['failed'])} failed",
             "", "in total:"]
    header = ["", *(words for _, words in _PARTS)]
    lines.extend(_table([header, *_count_cells(report["totals"])], right=frozenset({1, 2, 3})))
    if answered:
        lines += ["", "per node (eviction decisions / finding episodes: only under P, only under current, shifted):"]
        rows = [["node", "state", "evictions", "findings"]]
        for o in answered:
            counts = _counts(o.result["diff"])
            rows.append([o.node, o.state, *("/".join(str(counts[s][p]) for p, _ in _PARTS) for s, _ in _SECTIONS)])
        lines.extend(columns(rows))
    for kind, key, noun in (("pods", "pod", "pods"), ("tenants", "namespace", "tenants (namespaces)")):
        ranked = report["most_affected"][kind]
        lines += ["", f"most affected {noun}:" if ranked else f"most affected {noun}: none"]
        if ranked:  # changes: changed decisions and episodes naming it; evictions: those that are decisions
            rows = [[key, "changes", "evictions"]]
            rows += [[row[key], str(row["changes"]), str(row["evictions"])] for row in ranked]
            lines.extend(_table(rows, right=frozenset({1, 2})))
    lines += ["", f"failed nodes: {len(report['failed'])}" if report["failed"] else "failed nodes: none"]
    lines.extend(columns([[row["node"] or "-", row["pod"], row["state"], row["reason"]] for row in report["failed"]]))
    for o in answered:
        result = o.result
        name_a = label(result["a"].get("policy_source", "trace"))
        lines += ["", f"== node {o.node} ({o.pod}, {o.state}) =="]
        lines.append(format_compare(result["diff"], name_a=name_a, name_b=report["policy"]))
    return "\n".join(lines) + "\n"
