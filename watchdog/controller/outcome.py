"""What became of an eviction whose answer never arrived: the pod is looked at before the firing is forgotten.

An eviction POST that timed out, lost its connection or got a 5xx may still have been carried out: the API server
can have written the deletion before the client gave up, and a proxy or gateway in between answers 502/504 for a
request it did forward. Forgetting the firing then (ERROR is retryable) lets Alertmanager's next delivery of the
same firing evict the tenant's next pod. So an unknown outcome is settled by reading the pod: gone, terminating
(metadata.deletionTimestamp set), ended, or replaced by a namesake with another uid ⇒ the eviction is taken as done;
still there with the same uid ⇒ it was not, and may be retried. When the pod cannot be read either, the firing is
recorded as "unknown <namespace>/<name> uid=<uid>" in the ledger and checked again on the next delivery: until
then nothing more is sent for it.
"""

from __future__ import annotations

from typing import Protocol

from watchdog.model import ActionOutcome, EvictionResult, Mode, PodInfo, PodRef

STILL_THERE = "still there"
UNKNOWN = "unknown"


class PodReader(Protocol):
    """watchdog.kube's pod listing (raises when the API cannot be read)."""

    async def list_pods(
        self, *, label_selector: str | None = None, field_selector: str | None = None, namespace: str | None = None
    ) -> list[PodInfo]: ...


def outcome_unknown(outcome: ActionOutcome) -> bool:
    """True for an enforced eviction that ended ERROR with no answer (timeout, connection) or a 5xx: it may have
    happened. A dry run never evicts and a 4xx is the API server's own refusal, so neither is in doubt."""
    if outcome.result is not EvictionResult.ERROR or outcome.mode is not Mode.ENFORCE:
        return False
    return outcome.http_status is None or outcome.http_status >= 500


async def pod_fate(pods: PodReader | None, pod: PodRef) -> str:
    """"gone", "terminating", "ended" or "replaced" (the eviction is taken as done), or STILL_THERE. Raises when
    the pod cannot be read."""
    if pods is None:
        raise ConnectionError("no Kubernetes API to read the pod")
    # A list by name, not a GET: the controller's RBAC grants list on pods (deploy/rbac.yaml), and the API server
    # answers an empty list, not a 404, for a pod that is gone.
    found = await pods.list_pods(namespace=pod.namespace, field_selector=f"metadata.name={pod.name}")
    match = next((p for p in found if p.namespace == pod.namespace and p.name == pod.name), None)
    if match is None:
        return "gone"
    if pod.uid and match.uid != pod.uid:
        return "replaced"
    if match.deleting:
        return "terminating"
    if match.phase in ("Succeeded", "Failed"):
        return "ended"
    return STILL_THERE


def unknown_entry(pod: PodRef, identity: str) -> str:
    """The ledger entry of a firing whose eviction may have happened and could not be checked."""
    return f"{UNKNOWN} {pod.namespace}/{pod.name} uid={pod.uid} by {identity}".strip()


def parse_unknown_entry(entry: str) -> PodRef | None:
    """The pod an "unknown …" ledger entry names; None for every other entry (those mean handled)."""
    parts = entry.split()
    if len(parts) < 3 or parts[0] != UNKNOWN or "/" not in parts[1] or not parts[2].startswith("uid="):
        return None
    namespace, name = parts[1].split("/", 1)
    return PodRef(namespace, name, parts[2][len("uid="):])
