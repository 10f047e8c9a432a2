"""The watchdog's only write path to pods: policy/v1 evictions, the Events that explain them, the kill switch, and
the pod listing the controller decides on.

An eviction goes through the API server's eviction subresource (never a plain DELETE) so PodDisruptionBudgets hold.
Its answers are mapped onto exactly one EvictionResult each (reference §1, pkg/registry/core/pod/storage/eviction.go):
- 2xx with a Success Status → EVICTED (DRY_RUN when ``dryRun=All``); any 2xx is accepted, the docs say 200, the
  server sends 201.
- 2xx with a Failure Status → BLOCKED (and a 500 naming several PDBs, as the docs describe it). Several PDBs
  matching the pod come back this way: eviction.go returns the Status as its result and the create handler writes it
  with 201, and the Python clients raise only on the HTTP status, so the body is read here
  (``*_without_preload_content``) and checked, as client-go does.
- 429 with a ``details.causes[].reason == "DisruptionBudget"`` → BLOCKED_PDB, with Retry-After /
  details.retryAfterSeconds when the server sent one (only while the disruption controller has not observed the PDB;
  otherwise the caller backs off by itself).
- any other 429 → RATE_LIMITED with its Retry-After: API Priority and Fairness (or a proxy) throttling the request,
  which says nothing about the pod's budget (apiserver/pkg/server/filters/priority-and-fairness.go answers 429 with
  a Retry-After header and no causes).
- 404 → GONE; 409 from the uid precondition → GONE (the pod was replaced by another of the same name).
- 403 → ERROR naming the missing RBAC rule; 5xx, timeouts and connection errors → ERROR.
Nothing here raises: a failed call is a result, so the evictor can count it and move on.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from kubernetes.aio import client as k8s

from watchdog.kube.client import KubeApi
from watchdog.kube.errors import KubeNotFound, error_for_status, kube_errors, status_body, translate
from watchdog.kube.pods import pod_info
from watchdog.model import EvictionResult, PodInfo, PodRef

log = logging.getLogger(__name__)

RBAC_EVICTION = "RBAC: the service account needs create on pods/eviction"
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"
_TRUE = frozenset({"true", "1", "yes", "on"})


@dataclass(frozen=True, slots=True)
class EvictionReply:
    result: EvictionResult
    http_status: int | None
    message: str
    retry_after: float | None = None


def _retry_after(headers: object, body: dict) -> float | None:
    header = getattr(headers, "get", lambda _key: None)("Retry-After")
    if header:
        try:
            return float(header)
        except ValueError:
            pass  # an HTTP-date form is legal but the API server sends seconds
    seconds = (body.get("details") or {}).get("retryAfterSeconds")
    return float(seconds) if seconds else None


def classify_eviction(status: int, body: dict, *, dry_run: bool, headers: object = None) -> EvictionReply:
    """The EvictionResult for one HTTP answer to an eviction POST."""
    message = str(body.get("message") or "")
    if 200 <= status < 300:
        if body.get("kind") == "Status" and body.get("status") == "Failure":
            return EvictionReply(EvictionResult.BLOCKED, status, message or "eviction refused")
        result = EvictionResult.DRY_RUN if dry_run else EvictionResult.EVICTED
        return EvictionReply(result, status, message or ("dry run accepted" if dry_run else "evicted"))
    if status == 429:
        causes = [c for c in (body.get("details") or {}).get("causes") or [] if isinstance(c, dict)]
        texts = [str(c["message"]) for c in causes if c.get("message")]
        text = "; ".join([message, *texts]) if texts else message
        retry_after = _retry_after(headers, body)
        # eviction.go attaches a StatusCause of type policyv1.DisruptionBudgetCause (JSON "reason") to its PDB
        # refusals (kubernetes-and-friends.md §1); APF's 429 carries no cause.
        if any(c.get("reason") == DISRUPTION_BUDGET_CAUSE for c in causes):
            return EvictionReply(EvictionResult.BLOCKED_PDB, status, text, retry_after)
        return EvictionReply(EvictionResult.RATE_LIMITED, status, f"throttled by the API server: {text or 'HTTP 429'}",
                             retry_after)
    if status == 404:
        return EvictionReply(EvictionResult.GONE, status, message or "pod not found")
    if status == 409 and "precondition" in message.lower():
        return EvictionReply(EvictionResult.GONE, status, f"pod was replaced: {message}")
    if status == 500 and "more than one PodDisruptionBudget" in message:
        # The docs say the multi-PDB refusal is a 500; the source sends it as a 2xx body (handled above).
        return EvictionReply(EvictionResult.BLOCKED, status, message)
    if status == 403:
        return EvictionReply(EvictionResult.ERROR, status, f"{RBAC_EVICTION} ({message or 'forbidden'})")
    return EvictionReply(EvictionResult.ERROR, status, f"HTTP {status}: {message or 'no message'}")


class KubeEvictions:
    """Evictions, Events, the kill switch and pod listing over one KubeApi."""

    def __init__(self, api: KubeApi, *, clock: Callable[[], float] = time.time):
        self.api = api
        self.clock = clock  # wall clock, for Event timestamps and names

    async def evict(self, pod: PodRef, *, dry_run: bool, grace_seconds: int | None = None) -> EvictionReply:
        options = k8s.V1DeleteOptions(
            grace_period_seconds=grace_seconds,
            # Evict the pod we decided on, not a namesake created since (eviction.go honours preconditions).
            preconditions=k8s.V1Preconditions(uid=pod.uid) if pod.uid else None,
        )
        body = k8s.V1Eviction(api_version="policy/v1", kind="Eviction",
                              metadata=k8s.V1ObjectMeta(name=pod.name, namespace=pod.namespace),
                              delete_options=options)
        try:
            response = await self.api.core.create_namespaced_pod_eviction_without_preload_content(
                pod.name, pod.namespace, body, dry_run="All" if dry_run else None,
                _request_timeout=self.api.timeout)
            raw = await response.read()
        except Exception as error:  # noqa: BLE001 - "never raises": transport failures are a result
            return EvictionReply(EvictionResult.ERROR, None, _describe(error))
        reply = classify_eviction(response.status, status_body(raw), dry_run=dry_run, headers=response.headers)
        log.info("eviction of %s (dry_run=%s): %s %s", pod.key, dry_run, reply.result.value, reply.message)
        return reply

    async def record_event(self, pod: PodRef, *, reason: str, message: str, type: str = "Warning",
                           action: str = "Evict", component: str = "gpu-watchdog", host: str = "") -> bool:
        """A core/v1 Event on the pod (what ``kubectl describe pod`` shows); False when it could not be written."""
        now = datetime.fromtimestamp(self.clock(), tz=timezone.utc)  # aware: a naive time is refused (400)
        event = k8s.CoreV1Event(
            # client-go's recorder names events "<object>.<unix nanoseconds in hex>" (tools/record/event.go).
            metadata=k8s.V1ObjectMeta(name=f"{pod.name}.{int(now.timestamp() * 1e9):x}", namespace=pod.namespace),
            involved_object=k8s.V1ObjectReference(api_version="v1", kind="Pod", name=pod.name,
                                                  namespace=pod.namespace, uid=pod.uid or None),
            reason=reason, message=message[:1024], type=type, action=action, count=1,
            source=k8s.V1EventSource(component=component, host=host or None),
            first_timestamp=now, last_timestamp=now,
            reporting_component=component, reporting_instance=host or component,
        )
        try:
            with kube_errors():
                await self.api.core.create_namespaced_event(pod.namespace, event, _request_timeout=self.api.timeout)
        except Exception as error:  # noqa: BLE001 - an unrecorded Event must not stop an eviction cycle
            log.warning("cannot record event %s on %s: %s", reason, pod.key, _describe(error))
            return False
        return True

    async def read_kill_switch(self, namespace: str, configmap_name: str, key: str = "paused") -> bool | None:
        """True when ConfigMap data[key] is "true" (or 1/yes/on); False when it or the key is absent; None when
        the API could not be read (the caller keeps its last known state)."""
        try:
            with kube_errors():
                config_map = await self.api.core.read_namespaced_config_map(
                    configmap_name, namespace, _request_timeout=self.api.timeout)
        except KubeNotFound:
            return False
        except Exception as error:  # noqa: BLE001
            log.warning("cannot read kill switch %s/%s: %s", namespace, configmap_name, _describe(error))
            return None
        value = (config_map.data or {}).get(key, "")
        return value.strip().lower() in _TRUE

    async def list_pods(self, *, label_selector: str | None = None, field_selector: str | None = None,
                        namespace: str | None = None) -> list[PodInfo]:
        """Pods matching the selectors, cluster-wide or in one namespace. Raises KubeError when unreadable."""
        with kube_errors():
            if namespace:
                response = await self.api.core.list_namespaced_pod_without_preload_content(
                    namespace, label_selector=label_selector, field_selector=field_selector,
                    _request_timeout=self.api.timeout)
            else:
                response = await self.api.core.list_pod_for_all_namespaces_without_preload_content(
                    label_selector=label_selector, field_selector=field_selector, _request_timeout=self.api.timeout)
            raw = await response.read()
        body = status_body(raw)
        if response.status != 200:
            raise error_for_status(response.status, body)
        return [pod_info(item) for item in body.get("items") or []]


def _describe(error: BaseException) -> str:
    try:
        return str(translate(error))
    except TypeError:
        return f"{type(error).__name__}: {error}"

