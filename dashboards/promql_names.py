"""Checks the PromQL in dashboards and alert rules against the metric catalogue.

Dashboards and alert rules are the two places a metric rename breaks silently: Prometheus answers an unknown name
with an empty result, not an error, so a panel goes blank and an alert can never fire (dcgm-exporter's label
renames broke users' queries exactly this way, NVIDIA/dcgm-exporter#655). This module finds every
`gpu_watchdog_*` name and every label a query relies on (selectors, `by`/`without`, `on`/`ignoring`/`group_*`,
`label_values`, legend templates) and reports the ones `watchdog.publishing.ALL_FAMILIES` does not define.

It is a deliberately small scanner, not a PromQL parser: it understands the subset our own queries use and errs on
the side of reporting. The generator calls it before writing a dashboard and the tests call it on the committed
files, so the contract is checked at both ends.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from watchdog.publishing import ALL_FAMILIES, FamilySpec
from watchdog.publishing.controller_metrics import ISOLATION_FAMILIES

METRIC_NAME = re.compile(r"\bgpu_watchdog_[a-z_]+\b")
# A selector right after a name: gpu_watchdog_x{a="b", c=~"d"}; strings may hold escaped quotes.
SELECTOR = re.compile(r'\b(gpu_watchdog_[a-z_]+)\s*\{((?:[^{}"]|"(?:[^"\\]|\\.)*")*)\}')
MATCHER_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"')
STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
AGGREGATION_GROUPING = re.compile(r"\b(by|without)\s*\(([^()]*)\)\s*\(")
MATCHING_GROUPING = re.compile(r"\b(on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
LABEL_VALUES = re.compile(r"label_values\(\s*(gpu_watchdog_[a-z_]+)[^,]*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)")
TOP_AGGREGATION = re.compile(r"\s*(?:sum|max|min|avg|count)\s*by\s*\(([^()]*)\)\s*\(")
LEGEND_LABEL = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")
# Sample suffixes Prometheus derives from one family (exposition format): only histograms and summaries have them.
DERIVED_SUFFIXES = {"_bucket": ("histogram",), "_sum": ("histogram", "summary"), "_count": ("histogram", "summary")}


def families_by_name(families: Iterable[FamilySpec] = ALL_FAMILIES + ISOLATION_FAMILIES) -> dict[str, FamilySpec]:
    """The catalogue keyed by the exposed sample name (counters with their `_total`)."""
    return {family.name: family for family in families}


def resolve(name: str, catalogue: Mapping[str, FamilySpec]) -> FamilySpec | None:
    """The family a sample name belongs to, or None; `_bucket/_sum/_count` only for histograms/summaries."""
    if name in catalogue:
        return catalogue[name]
    for suffix, kinds in DERIVED_SUFFIXES.items():
        base = catalogue.get(name.removesuffix(suffix)) if name.endswith(suffix) else None
        if base is not None and base.kind in kinds:
            return base
    return None


def metric_names(expr: str) -> list[str]:
    """Every `gpu_watchdog_*` name in the query, in order of appearance (label values are not scanned)."""
    return METRIC_NAME.findall(STRING.sub('""', expr))


def labels_of(family: FamilySpec) -> frozenset[str]:
    """Labels a query may rely on: `tenant` is optional (only with a tenant pod label), so it is not one."""
    return frozenset(family.label_names(with_tenant=False))


def _balanced_argument(text: str, open_index: int) -> str:
    """The text inside the parenthesis that opens at `open_index`."""
    depth = 0
    for index in range(open_index, len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                return text[open_index + 1 : index]
    raise ValueError(f"unbalanced parentheses in {text!r}")


def _split_labels(listing: str) -> list[str]:
    return [label.strip() for label in listing.split(",") if label.strip()]


def _families_in(expr: str, catalogue: Mapping[str, FamilySpec]) -> list[FamilySpec]:
    found = (resolve(name, catalogue) for name in metric_names(expr))
    return [family for family in found if family is not None]


def problems(expr: str, catalogue: Mapping[str, FamilySpec] | None = None) -> list[str]:
    """What in `expr` the catalogue does not back: unknown names and labels, each as one readable line.

    Rules: every name resolves to a family; a selector's labels exist on its family; `by`/`without` labels exist
    on some family inside the aggregated argument; `on`/`ignoring`/`group_*` labels exist on every family of the
    expression (both sides must carry a label to match on it); `label_values(metric, label)` names a real label.
    Names outside the catalogue's prefix (recording rules such as `gpu_watchdog:…`) are left to the caller.
    """
    catalogue = families_by_name() if catalogue is None else catalogue
    found: list[str] = []
    for name in metric_names(expr):
        if resolve(name, catalogue) is None:
            found.append(f"unknown metric {name}")
    for name, matchers in SELECTOR.findall(expr):
        family = resolve(name, catalogue)
        for label in MATCHER_LABEL.findall(matchers):
            if family is not None and label != "__name__" and label not in labels_of(family):
                found.append(f"{name} has no label {label!r} (selector)")
    bare = STRING.sub('""', expr)
    for match in AGGREGATION_GROUPING.finditer(bare):
        scope = _families_in(_balanced_argument(bare, match.end() - 1), catalogue)
        available = frozenset().union(*(labels_of(family) for family in scope))
        for label in _split_labels(match.group(2)):
            if scope and label not in available:
                found.append(f"{match.group(1)} ({label}): no metric inside the aggregation has that label")
    everywhere = _families_in(bare, catalogue)
    for match in MATCHING_GROUPING.finditer(bare):
        for label in _split_labels(match.group(2)):
            missing = sorted(family.name for family in everywhere if label not in labels_of(family))
            if missing:
                found.append(f"{match.group(1)} ({label}): not a label of {', '.join(missing)}")
    for name, label in LABEL_VALUES.findall(expr):
        family = resolve(name, catalogue)
        if family is not None and label not in labels_of(family):
            found.append(f"label_values: {name} has no label {label!r}")
    return found


def legend_problems(legend: str, expr: str, catalogue: Mapping[str, FamilySpec] | None = None) -> list[str]:
    """Legend `{{label}}`s that no metric of the query carries (the legend would print an empty string)."""
    catalogue = families_by_name() if catalogue is None else catalogue
    outer = TOP_AGGREGATION.match(expr)
    if outer is not None:  # `sum by (a, b) (…)` keeps exactly a and b
        available = frozenset(_split_labels(outer.group(1)))
    else:
        available = frozenset().union(*(labels_of(family) for family in _families_in(expr, catalogue)))
    return [
        f"legend uses {{{{{label}}}}} but the query has no such label"
        for label in LEGEND_LABEL.findall(legend)
        if label not in available
    ]
