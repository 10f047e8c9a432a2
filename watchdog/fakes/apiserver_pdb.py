"""PodDisruptionBudget arithmetic and the eviction decision, as the disruption controller and the eviction
subresource compute them.

The watchdog's safety rests on the API server refusing evictions a PDB forbids, so the fake must refuse exactly
when a real cluster would. Sources:
- pkg/controller/disruption/disruption.go (getExpectedPodCount, countHealthyPods, updatePdbStatus): expected pods,
  desiredHealthy from minAvailable/maxUnavailable (percentages rounded up, intstr.GetScaledValueFromIntOrPercent),
  currentHealthy = Ready pods not being deleted, disruptionsAllowed = max(0, currentHealthy - desiredHealthy).
- pkg/registry/core/pod/storage/eviction.go (Create, checkAndDecrement, canIgnorePDB): which pods skip the PDB
  check, the multi-PDB Failure Status, the 429 with a DisruptionBudget cause, and the 10 s retryAfter while the
  controller has not observed the PDB's generation.

The fake has no workload controllers, so "expected pods" is the number of pods the selector matches (what the
controller uses for minAvailable as an integer); the real controller uses the owning controllers' scale for
percentages and maxUnavailable. Documented in docs/fake-apiserver.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from watchdog.fakes.apiserver_selectors import labels_match, selector_from_spec
from watchdog.fakes.apiserver_store import status_body

MULTIPLE_PDBS = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
BLOCKED_BY_PDB = "Cannot evict pod as it would violate the pod's disruption budget."


def pod_ready(pod: dict[str, Any]) -> bool:
    """podutil.IsPodReady: the Ready condition is True (and, here, the pod is Running)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())


def _scaled(value: int | str, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


@dataclass(frozen=True, slots=True)
class Budget:
    expected: int
    desired_healthy: int
    current_healthy: int

    @property
    def disruptions_allowed(self) -> int:
        return max(0, self.current_healthy - self.desired_healthy)


def pdb_selects(pdb: dict[str, Any], pod: dict[str, Any]) -> bool:
    if pdb["metadata"].get("namespace") != pod["metadata"].get("namespace"):
        return False
    return labels_match(selector_from_spec(pdb.get("spec", {}).get("selector")), pod["metadata"].get("labels"))


def compute_budget(pdb: dict[str, Any], pods: Iterable[dict[str, Any]]) -> Budget:
    matching = [p for p in pods if pdb_selects(pdb, p)]
    healthy = sum(1 for p in matching if pod_ready(p) and not p["metadata"].get("deletionTimestamp"))
    expected = len(matching)
    spec = pdb.get("spec") or {}
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
    elif spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected)
    else:
        desired = 0
    return Budget(expected=expected, desired_healthy=desired, current_healthy=healthy)


def pdb_status(pdb: dict[str, Any], pods: Iterable[dict[str, Any]], *, observed: bool) -> dict[str, Any]:
    """The status the disruption controller would have written (observedGeneration lags when not observed)."""
    budget = compute_budget(pdb, pods)
    generation = pdb["metadata"].get("generation", 1)
    return {
        "observedGeneration": generation if observed else generation - 1,
        "disruptionsAllowed": budget.disruptions_allowed,
        "currentHealthy": budget.current_healthy,
        "desiredHealthy": budget.desired_healthy,
        "expectedPods": budget.expected,
    }


def validate_pdb_spec(spec: dict[str, Any]) -> str | None:
    """ValidatePodDisruptionBudgetSpec: minAvailable and maxUnavailable are mutually exclusive."""
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        return "spec: Invalid value: minAvailable and maxUnavailable cannot be both set"
    for key in ("minAvailable", "maxUnavailable"):
        value = spec.get(key)
        if isinstance(value, str) and not (value.endswith("%") and value[:-1].isdigit()):
            return f"spec.{key}: Invalid value: {value!r}: a valid percent string must be a numeric string followed by an ending '%'"
    return None


@dataclass(frozen=True, slots=True)
class EvictionVerdict:
    """What eviction.go decides before (maybe) deleting: allowed, or a Status to answer with."""

    allowed: bool
    http_code: int = 201
    status: dict[str, Any] | None = None  # the Status body to answer with when not allowed
    retry_after: int | None = None


def decide_eviction(pod: dict[str, Any], pdbs: list[dict[str, Any]], pods: list[dict[str, Any]], *,
                    unobserved: set[str]) -> EvictionVerdict:
    """eviction.go Create, after the pod was found: which PDB applies and whether it allows one more disruption."""
    phase = (pod.get("status") or {}).get("phase")
    # canIgnorePDB: terminal, pending or already-terminating pods are deleted without consulting any PDB.
    if phase in ("Succeeded", "Failed", "Pending") or pod["metadata"].get("deletionTimestamp"):
        return EvictionVerdict(allowed=True)
    matching = [pdb for pdb in pdbs if pdb_selects(pdb, pod)]
    if not matching:
        return EvictionVerdict(allowed=True)
    if len(matching) > 1:
        # Returned as the result object, not as an error, so the create handler writes it with HTTP 201.
        return EvictionVerdict(allowed=False, http_code=201, status=status_body(500, MULTIPLE_PDBS, reason=""))
    pdb = matching[0]
    name = pdb["metadata"]["name"]
    if name in unobserved:
        cause = f"The disruption budget {name} is still being processed by the server."
        return _too_many(cause, retry_after=10)
    budget = compute_budget(pdb, pods)
    # unhealthyPodEvictionPolicy IfHealthyBudget (the default): a not-ready pod may go while the budget is met.
    policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy", "IfHealthyBudget")
    if not pod_ready(pod) and (policy == "AlwaysAllow" or budget.current_healthy >= budget.desired_healthy):
        return EvictionVerdict(allowed=True)
    if budget.disruptions_allowed == 0:
        cause = (f"The disruption budget {name} needs {budget.desired_healthy} healthy pods "
                 f"and has {budget.current_healthy} currently")
        return _too_many(cause, retry_after=None)
    return EvictionVerdict(allowed=True)


def _too_many(cause: str, *, retry_after: int | None) -> EvictionVerdict:
    details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return EvictionVerdict(allowed=False, http_code=429, retry_after=retry_after,
                           status=status_body(429, BLOCKED_BY_PDB, details=details))
