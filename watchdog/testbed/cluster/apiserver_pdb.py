"""PodDisruptionBudget arithmetic and the eviction decision, as the disruption controller and the eviction
subresource compute them.

The watchdog's safety rests on the API server refusing evictions a PDB forbids, so the fake must refuse exactly
when a real cluster would. Sources:
- pkg/controller/disruption/disruption.go (getExpectedPodCount, getExpectedScale, countHealthyPods,
  buildDisruptedPodMap, updatePdbStatus): expected pods, desiredHealthy from minAvailable/maxUnavailable
  (percentages rounded up, intstr.GetScaledValueFromIntOrPercent), currentHealthy = Ready pods neither being deleted
  nor listed in status.disruptedPods, disruptionsAllowed = currentHealthy - desiredHealthy, and 0 when that is
  negative or when expectedPods is 0.
- pkg/registry/core/pod/storage/eviction.go (Create, checkAndDecrement, canIgnorePDB): which pods skip the PDB
  check, the unhealthy-pod rule, the multi-PDB Failure Status, the 429 with a DisruptionBudget cause, the 10 s
  retryAfter while the controller has not observed the PDB's generation, and the disruptedPods entry it writes.

The fake has no workload controllers. For maxUnavailable and percentage minAvailable the real controller's
expectedPods is the owning controllers' scale (getExpectedScale), which does not shrink when a pod is evicted; the
fake stands in for it with the most pods the selector has matched at once (not terminating, not finished) since
the PDB was created, or an explicit count given to ``add_pdb(expected=)``. For an integer minAvailable the real
controller uses the matching pods (len(pods)) and so does the fake. Documented in docs/fake-apiserver.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Collection, Iterable

from watchdog.testbed.cluster.apiserver_selectors import labels_match, selector_from_spec
from watchdog.testbed.cluster.apiserver_store import PDBS, PODS, Store, StoredEvent, rfc3339, status_body

MULTIPLE_PDBS = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
BLOCKED_BY_PDB = "Cannot evict pod as it would violate the pod's disruption budget."
DELETION_TIMEOUT = 120.0  # disruption.go DeletionTimeout: a disrupted pod not deleted within 2 minutes counts again


def pod_ready(pod: dict[str, Any]) -> bool:
    """podutil.IsPodReady (pkg/api/v1/pod/util.go): the Ready condition is True, whatever the phase says."""
    status = pod.get("status") or {}
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())


def _deleting(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


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
        # updatePdbStatus: "We require expectedCount to be > 0 so that PDBs which currently match no pods are in a
        # safe state when their first pods appear".
        if self.expected <= 0:
            return 0
        return max(0, self.current_healthy - self.desired_healthy)


def pdb_selects(pdb: dict[str, Any], pod: dict[str, Any]) -> bool:
    if pdb["metadata"].get("namespace") != pod["metadata"].get("namespace"):
        return False
    return labels_match(selector_from_spec(pdb.get("spec", {}).get("selector")), pod["metadata"].get("labels"))


def _counts_toward_scale(pod: dict[str, Any]) -> bool:
    return not _deleting(pod) and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def compute_budget(pdb: dict[str, Any], pods: Iterable[dict[str, Any]], *, scale: int | None = None,
                   disrupted: Collection[str] = ()) -> Budget:
    """getExpectedPodCount + countHealthyPods. ``scale`` stands in for the owning controllers' replicas (None: the
    pods matched now); ``disrupted`` names pods the eviction subresource has promised to delete."""
    matching = [p for p in pods if pdb_selects(pdb, p)]
    healthy = sum(1 for p in matching
                  if pod_ready(p) and not _deleting(p) and p["metadata"].get("name") not in disrupted)
    if scale is None:
        scale = sum(1 for p in matching if _counts_toward_scale(p))
    spec = pdb.get("spec") or {}
    if spec.get("maxUnavailable") is not None:
        expected = scale
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
    elif isinstance(spec.get("minAvailable"), int):
        expected, desired = len(matching), spec["minAvailable"]
    elif spec.get("minAvailable") is not None:
        expected = scale
        desired = _scaled(spec["minAvailable"], expected)
    else:
        expected, desired = 0, 0  # neither set: getExpectedPodCount leaves both at zero
    return Budget(expected=expected, desired_healthy=desired, current_healthy=healthy)


class PdbState:
    """What the disruption controller remembers per PDB and the fake cannot read off the objects: the stand-in
    for the owning controllers' scale, and status.disruptedPods (pod name → eviction time).

    It follows the store like the controller's informers do (``Store.observers``): every pod change can raise a
    PDB's scale, and a disrupted pod that starts terminating or disappears leaves disruptedPods
    (buildDisruptedPodMap), so a replacement with the same name (a StatefulSet's) counts once it is Ready.
    """

    def __init__(self, store: Store, *, unobserved: set[str]):
        self.store = store
        self.unobserved = unobserved  # names of PDBs whose generation the controller has not observed yet
        self._scale: dict[str, int] = {}  # by PDB uid: the most pods matched at once
        self._fixed: dict[str, int] = {}  # by PDB uid: an explicit expected count (add_pdb(expected=))
        self._disrupted: dict[str, dict[str, float]] = {}  # by PDB uid
        store.observers.append(self._observe)

    def set_expected(self, pdb: dict[str, Any], expected: int | None) -> None:
        """Fix a PDB's expected pods (the workload's replicas), or None to go back to the high-water mark."""
        uid = pdb["metadata"]["uid"]
        if expected is None:
            self._fixed.pop(uid, None)
        elif expected < 0:
            raise ValueError(f"expected pods must be >= 0, got {expected}")
        else:
            self._fixed[uid] = int(expected)

    def budget(self, pdb: dict[str, Any], pods: Iterable[dict[str, Any]]) -> Budget:
        uid = pdb["metadata"].get("uid", "")
        pods = list(pods)
        scale = self._fixed.get(uid)
        if scale is None:
            now = sum(1 for p in pods if pdb_selects(pdb, p) and _counts_toward_scale(p))
            scale = max(self._scale.get(uid, 0), now)
        return compute_budget(pdb, pods, scale=scale, disrupted=self.disrupted(pdb))

    def disrupted(self, pdb: dict[str, Any]) -> dict[str, float]:
        """status.disruptedPods without entries older than DeletionTimeout (countHealthyPods ignores those)."""
        entries = self._disrupted.get(pdb["metadata"].get("uid", ""), {})
        now = self.store.clock()
        return {name: at for name, at in entries.items() if at + DELETION_TIMEOUT > now}

    def record_disruption(self, pdb: dict[str, Any], pod_name: str) -> None:
        """checkAndDecrement: 'Eviction handler needs to inform the PDB controller that it is about to delete a
        pod so it should not consider it as available'. Written before the pod's delete, kept if it fails."""
        self._disrupted.setdefault(pdb["metadata"]["uid"], {})[pod_name] = self.store.clock()

    def status(self, pdb: dict[str, Any], pods: Iterable[dict[str, Any]]) -> dict[str, Any]:
        """The status the disruption controller would have written (observedGeneration lags when not observed)."""
        budget = self.budget(pdb, pods)
        generation = pdb["metadata"].get("generation", 1)
        observed = pdb["metadata"]["name"] not in self.unobserved
        status: dict[str, Any] = {
            "observedGeneration": generation if observed else generation - 1,
            "disruptionsAllowed": budget.disruptions_allowed,
            "currentHealthy": budget.current_healthy,
            "desiredHealthy": budget.desired_healthy,
            "expectedPods": budget.expected,
        }
        if disrupted := self.disrupted(pdb):
            status["disruptedPods"] = {name: rfc3339(at) for name, at in sorted(disrupted.items())}
        return status

    def _observe(self, event: StoredEvent) -> None:
        if event.resource is PDBS:
            uid = event.obj["metadata"].get("uid", "")
            if event.type == "DELETED":
                for table in (self._scale, self._fixed, self._disrupted):
                    table.pop(uid, None)
            elif event.type == "ADDED" or (event.previous or {}).get("spec") != event.obj.get("spec"):
                # A new or re-targeted PDB: its scale is what it selects from now on.
                self._scale[uid] = self._matched(event.obj)
            return
        if event.resource is not PODS:
            return
        pod, namespace = event.obj, event.obj["metadata"].get("namespace")
        name = pod["metadata"].get("name")
        gone = event.type == "DELETED" or _deleting(pod)
        for pdb in self.store.list(PDBS, namespace):
            uid = pdb["metadata"].get("uid", "")
            if gone:
                self._disrupted.get(uid, {}).pop(name, None)
            elif pdb_selects(pdb, pod):
                self._scale[uid] = max(self._scale.get(uid, 0), self._matched(pdb))

    def _matched(self, pdb: dict[str, Any]) -> int:
        namespace = pdb["metadata"].get("namespace")
        return sum(1 for p in self.store.list(PODS, namespace) if pdb_selects(pdb, p) and _counts_toward_scale(p))


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
    consumes: dict[str, Any] | None = None  # the PDB whose disruption this eviction uses (disruptedPods entry)


def decide_eviction(pod: dict[str, Any], pdbs: list[dict[str, Any]], pods: list[dict[str, Any]], *,
                    state: PdbState) -> EvictionVerdict:
    """eviction.go Create, after the pod was found: which PDB applies and whether it allows one more disruption."""
    phase = (pod.get("status") or {}).get("phase")
    # canIgnorePDB: terminal, pending or already-terminating pods are deleted without consulting any PDB.
    if phase in ("Succeeded", "Failed", "Pending") or _deleting(pod):
        return EvictionVerdict(allowed=True)
    matching = [pdb for pdb in pdbs if pdb_selects(pdb, pod)]
    if not matching:
        return EvictionVerdict(allowed=True)
    if len(matching) > 1:
        # Returned as the result object, not as an error, so the create handler writes it with HTTP 201.
        return EvictionVerdict(allowed=False, http_code=201, status=status_body(500, MULTIPLE_PDBS, reason=""))
    pdb = matching[0]
    name = pdb["metadata"]["name"]
    unobserved = name in state.unobserved
    # A PDB the controller never processed has an empty status (all zeros) as far as eviction.go can see.
    budget = Budget(0, 0, 0) if unobserved else state.budget(pdb, pods)
    if not pod_ready(pod):
        # eviction.go: a not-ready pod goes without using a disruption under AlwaysAllow, or under IfHealthyBudget
        # (the default) only when "pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy &&
        # pdb.Status.DesiredHealthy > 0"; otherwise it falls through to checkAndDecrement like a ready pod.
        policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
        if policy == "AlwaysAllow" or (budget.desired_healthy > 0
                                       and budget.current_healthy >= budget.desired_healthy):
            return EvictionVerdict(allowed=True)
    # checkAndDecrement, in its order: generation not observed, then no disruption left.
    if unobserved:
        cause = f"The disruption budget {name} is still being processed by the server."
        return _too_many(cause, retry_after=10)
    if budget.disruptions_allowed == 0:
        cause = (f"The disruption budget {name} needs {budget.desired_healthy} healthy pods "
                 f"and has {budget.current_healthy} currently")
        return _too_many(cause, retry_after=None)
    return EvictionVerdict(allowed=True, consumes=pdb)


def _too_many(cause: str, *, retry_after: int | None) -> EvictionVerdict:
    details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return EvictionVerdict(allowed=False, http_code=429, retry_after=retry_after,
                           status=status_body(429, BLOCKED_BY_PDB, details=details))
