"""Label and field selectors as the API server parses them, for the fake API server.

The agent lists its node's pods with ``fieldSelector=spec.nodeName=<node>`` and the controller lists a tenant's pods
with label selectors; PodDisruptionBudgets select pods with ``matchLabels``/``matchExpressions``. A fake that
ignored selectors (as kmock does) would let bugs in those queries pass, so this module implements the grammar of
k8s.io/apimachinery/pkg/labels/selector.go (``=``, ``==``, ``!=``, ``in``, ``notin``, ``key``, ``!key``) and of
k8s.io/apimachinery/pkg/fields/selector.go (``=``, ``==``, ``!=`` only), and refuses what the real server refuses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping


class SelectorError(ValueError):
    """A selector the real API server would answer with 400 BadRequest."""


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "=":
            return present and value == self.values[0]
        if self.operator == "!=":
            # labels.Requirement.Matches: NotEquals also matches when the key is absent.
            return not present or value != self.values[0]
        if self.operator == "in":
            return present and value in self.values
        if self.operator == "notin":
            return not present or value not in self.values
        if self.operator == "exists":
            return present
        return not present  # "!"


_KEY = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_TERM = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\(([^)]*)\)\s*$")
_EQ_TERM = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*$")
_EXISTS_TERM = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not inside a ``( … )`` value set."""
    terms, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return terms


def parse_label_selector(text: str | None) -> tuple[Requirement, ...]:
    """Parse a ``labelSelector`` query value; an empty one selects everything."""
    if not text or not text.strip():
        return ()
    requirements = []
    for term in _split_terms(text):
        if match := _SET_TERM.match(term):
            values = tuple(v.strip() for v in match.group(3).split(",") if v.strip())
            if not values:
                raise SelectorError(f"unable to parse requirement: {term!r}: for 'in', 'notin' operators, values set can't be empty")
            requirements.append(Requirement(match.group(1), match.group(2), values))
        elif match := _EQ_TERM.match(term):
            operator = "=" if match.group(2) in ("=", "==") else "!="
            requirements.append(Requirement(match.group(1), operator, (match.group(3),)))
        elif match := _EXISTS_TERM.match(term):
            requirements.append(Requirement(match.group(2), "!" if match.group(1) else "exists"))
        else:
            raise SelectorError(f"unable to parse requirement: found {term.strip()!r}, expected a label selector term")
    return tuple(requirements)


def selector_from_spec(spec: Mapping[str, Any] | None) -> tuple[Requirement, ...] | None:
    """Turn a metav1.LabelSelector (``matchLabels`` + ``matchExpressions``) into requirements.

    ``None`` means "selects nothing" (a nil selector); an empty selector selects everything, which is what
    policy/v1 PodDisruptionBudgets mean by an empty ``selector`` (docs: "Specifying a PodDisruptionBudget").
    """
    if spec is None:
        return None
    requirements = [Requirement(key, "=", (str(value),)) for key, value in (spec.get("matchLabels") or {}).items()]
    operators = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expression in spec.get("matchExpressions") or []:
        operator = operators.get(expression.get("operator", ""))
        if operator is None:
            raise SelectorError(f"{expression.get('operator')!r} is not a valid label selector operator")
        requirements.append(Requirement(expression["key"], operator, tuple(expression.get("values") or ())))
    return tuple(requirements)


def labels_match(requirements: tuple[Requirement, ...] | None, labels: Mapping[str, str] | None) -> bool:
    if requirements is None:
        return False
    labels = labels or {}
    return all(requirement.matches(labels) for requirement in requirements)


# Field labels each resource supports (pkg/registry/core/pod/strategy.go PodToSelectableFields, and
# generic.ObjectMetaFieldsSet for everything else). Anything else is 400 "field label not supported".
_FIELD_GETTERS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "metadata.name": lambda obj: obj.get("metadata", {}).get("name", ""),
    "metadata.namespace": lambda obj: obj.get("metadata", {}).get("namespace", ""),
    "spec.nodeName": lambda obj: obj.get("spec", {}).get("nodeName", "") or "",
    "status.phase": lambda obj: obj.get("status", {}).get("phase", "") or "",
    # pkg/registry/core/node/strategy.go NodeToSelectableFields: the bool as strconv.FormatBool writes it.
    "spec.unschedulable": lambda obj: "true" if (obj.get("spec") or {}).get("unschedulable") else "false",
    # pkg/registry/core/event/strategy.go ToSelectableFields (what `kubectl describe` asks for an object's Events).
    **{f"involvedObject.{key}": (lambda key: lambda obj: str((obj.get("involvedObject") or {}).get(key) or ""))(key)
       for key in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")},
    # pkg/apis/resource/v1/conversion.go addConversionFuncs: a ResourceSlice selects on spec.nodeName, spec.driver.
    "spec.driver": lambda obj: (obj.get("spec") or {}).get("driver") or "",
    "reason": lambda obj: obj.get("reason") or "",
    "type": lambda obj: obj.get("type") or "",
    "reportingComponent": lambda obj: obj.get("reportingComponent") or "",
    "source": lambda obj: (obj.get("source") or {}).get("component") or obj.get("reportingComponent") or "",
}
POD_FIELDS = frozenset({"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"})
NODE_FIELDS = frozenset({"metadata.name", "spec.unschedulable"})
EVENT_FIELDS = frozenset(key for key in _FIELD_GETTERS if key.startswith(("metadata.", "involvedObject."))) | {
    "reason", "type", "reportingComponent", "source"}
META_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
SLICE_FIELDS = frozenset({"metadata.name", "spec.nodeName", "spec.driver"})

FieldSelector = tuple[tuple[str, str, str], ...]  # (field, "=" | "!=", value)


def parse_field_selector(text: str | None, *, supported: frozenset[str]) -> FieldSelector:
    if not text or not text.strip():
        return ()
    terms = []
    for term in text.split(","):
        match = re.match(r"^\s*([A-Za-z.]+)\s*(==|=|!=)\s*(.*?)\s*$", term)
        if not match:
            raise SelectorError(f"invalid selector: {term!r}; can't understand {term!r}")
        field, operator, value = match.groups()
        if field not in supported:
            raise SelectorError(f'field label not supported: {field}')
        terms.append((field, "!=" if operator == "!=" else "=", value))
    return tuple(terms)


def fields_match(selector: FieldSelector, obj: Mapping[str, Any]) -> bool:
    for field, operator, value in selector:
        actual = _FIELD_GETTERS[field](obj)
        if (actual == value) != (operator == "="):
            return False
    return True
