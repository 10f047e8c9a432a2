"""The watchdog's only write path to pods: policy/v1 evictions, the Events that explain them, the kill switch, and
the pod listing the controller decides on.

An eviction goes through the API server's eviction subresource (never a plain DELETE) so PodDisruptionBudgets hold.
Its answers are mapped onto exactly one EvictionResult each (kubernetes pkg/registry/core/pod/storage/eviction.go):
- 2xx with a Success Status → EVICTED (DRY_RUN when ``dryRun=All``); any 2xx is accepted, the docs say 200, the
  server sends 201.
- 2xx with a Failure Status → BLOCKED (and a 500 naming several PDBs, as the docs describe it). Several PDBs
  matching the pod come back this way: eviction.go returns the Status as its result and the create handler writes it
  with 201, and the Python clients raise only on the HTTP status, so the body is read here
  (``*_without_preload_content``) and checked, as client-go does.
- 429 with a ``details.causes[].reason == "DisruptionBudget"`` → BLOCKED_PDB, with Retry-After /
  details.retryAfterSeconds when the server sent one (only while the disruption controller has not observed the PDB;
  otherwise the caller backs off by itself).
- 429 from KubeVirt's webhook "virt-launcher-eviction-interceptor.kubevirt.io" (a virt-launcher pod): the message
  says whether the eviction became a live migration ("Eviction triggered evacuation of VMI", "Evacuation in
  progress: …") → MIGRATING, DRY_RUN in a dry run (the webhook answers the same without marking the VMI), or was
  refused (not live-migratable, the VMI on another node, the VMI not readable or markable) → BLOCKED with
  KubeVirt's reason (kubevirt/kubevirt pkg/virt-api/webhooks/validating-webhook/admitters/
  pod-eviction-admitter.go, docs/handling-eviction-requests.md). Any other webhook's 429 denial → BLOCKED. The API
  server words a webhook's denial 'admission webhook "<name>" denied the request: <message>'
  (staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/errors ToStatusErr) and the webhook runs before the
  PDB check, so these carry no DisruptionBudget cause.
- any other 429 → RATE_LIMITED with its Retry-After: API Priority and Fairness (or a proxy) throttling the request,
  which says nothing about the pod's budget (apiserver/pkg/server/filters/priority-and-fairness.go answers 429 with
  a Retry-After header and no causes).
- 404 → GONE; 409 from the uid precondition → GONE (the pod was replaced by another of the same name).
- 403 (or 422) from a ValidatingAdmissionPolicy → BLOCKED: the cluster's own bound (deploy/admission-policy.yaml)
  refused this pod, e.g. its namespace has not opted in; it is backed off per pod like a PDB refusal, not counted as
  an API failure that slows every send (the API server's wording: "ValidatingAdmissionPolicy '<policy>' with binding
  '<binding>' denied request: ...", staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating/dispatcher.go).
- any other 403 → ERROR naming the missing RBAC rule; 5xx, timeouts and connection errors → ERROR.
Nothing on the eviction path raises: a failed call is a result, so the evictor can count it and move on.

The Events the agent writes are also its memory across restarts: each carries labels (reason, node, tenant, the
pod's controller kind) so `recent_evictions()` can list this node's recent evictions with a label selector, which
every API server serves for every resource (a field selector on `reason` is served for core/v1 Events by
pkg/registry/core/event/strategy.go, but not on `source.host`, nor by the fake API server the tests run against).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable
from urllib.parse import quote

from watchdog.kube.client import KubeApi
from watchdog.kube.errors import (KubeForbidden, KubeNotFound, error_for_status, kube_errors, status_body,
                                  translate)
from watchdog.kube.pods import pod_info
from watchdog.kube.vmis import read_cluster_strategy, vmi_info
from watchdog.model import EvictionResult, PodInfo, PodRef, VmiInfo

log = logging.getLogger(__name__)

RBAC_EVICTION = "RBAC: the service account needs create on pods/eviction"
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"
ADMISSION_DENIAL = "ValidatingAdmissionPolicy '"
# ToStatusErr's two wordings: "...denied the request: <message or reason>" and, with neither, "...denied the request
# without explanation".
WEBHOOK_DENIAL = re.compile(
    r'admission webhook "(?P<webhook>[^"]+)" denied the request(?:: ?(?P<message>.*)| without explanation)', re.S)
KUBEVIRT_INTERCEPTOR = "virt-launcher-eviction-interceptor.kubevirt.io"
EVACUATION_TRIGGERED = "Eviction triggered evacuation of VMI"
EVACUATION_VMI = re.compile(r'evacuation of VMI \\?"(?P<vmi>[^"\\]+)\\?"')
_TRUE = frozenset({"true", "1", "yes", "on"})
EVENT_LABEL_REASON = "gpu-watchdog.io/reason"
EVENT_LABEL_NODE = "gpu-watchdog.io/node"
EVENT_LABEL_TENANT = "gpu-watchdog.io/tenant"
EVENT_LABEL_OWNER_KIND = "gpu-watchdog.io/owner-kind"
# apimachinery/pkg/util/validation IsValidLabelValue: at most 63 characters, alphanumeric at both ends.
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _label_value(value: str | None) -> str | None:
    """The value when the API server would accept it as a label value, else None (the label is left out)."""
    if value and len(value) <= 63 and _LABEL_VALUE.match(value):
        return value
    return None


@dataclass(frozen=True, slots=True)
class RecordedEviction:
    """One of this node's earlier attempts, as its Event tells it."""

    namespace: str
    name: str
    uid: str
    reason: str  # the Event's reason, e.g. GpuWatchdogEvicted
    age_seconds: float  # how long ago (by this client's clock) the Event was last written
    tenant: str | None = None
    owner_kind: str | None = None


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
        # refusals (checkAndDecrement); APF's 429 carries no cause.
        if any(c.get("reason") == DISRUPTION_BUDGET_CAUSE for c in causes):
            return EvictionReply(EvictionResult.BLOCKED_PDB, status, text, retry_after)
        denial = WEBHOOK_DENIAL.search(message)
        if denial is not None:
            return _webhook_denial(status, denial, dry_run=dry_run, retry_after=retry_after)
        return EvictionReply(EvictionResult.RATE_LIMITED, status, f"throttled by the API server: {text or 'HTTP 429'}",
                             retry_after)
    if status == 404:
        return EvictionReply(EvictionResult.GONE, status, message or "pod not found")
    if status == 409 and "precondition" in message.lower():
        return EvictionReply(EvictionResult.GONE, status, f"pod was replaced: {message}")
    if status == 500 and "more than one PodDisruptionBudget" in message:
        # The docs say the multi-PDB refusal is a 500; the source sends it as a 2xx body (handled above).
        return EvictionReply(EvictionResult.BLOCKED, status, message)
    if status in (403, 422) and ADMISSION_DENIAL in message:
        return EvictionReply(EvictionResult.BLOCKED, status, f"refused by the cluster's admission policy: {message}")
    if status == 403:
        return EvictionReply(EvictionResult.ERROR, status, f"{RBAC_EVICTION} ({message or 'forbidden'})")
    return EvictionReply(EvictionResult.ERROR, status, f"HTTP {status}: {message or 'no message'}")


def _webhook_denial(status: int, denial: re.Match[str], *, dry_run: bool,
                    retry_after: float | None) -> EvictionReply:
    """A 429 an admission webhook answered: KubeVirt's evacuation (a live migration started, or on its way) or a
    refusal; never the API server's throttling, never a PDB."""
    webhook, inner = denial.group("webhook"), (denial.group("message") or "").strip()
    if webhook == KUBEVIRT_INTERCEPTOR and EVACUATION_TRIGGERED in inner:
        found = EVACUATION_VMI.search(inner)
        vmi = found.group("vmi") if found else "of the pod"
        if dry_run:  # markVMI skips the patch in a dry run and the webhook still answers so: nothing moved
            return EvictionReply(EvictionResult.DRY_RUN, status, f"would live-migrate VMI {vmi} (KubeVirt: {inner})")
        what = "already in progress" if inner.startswith("Evacuation in progress") else "requested"
        return EvictionReply(EvictionResult.MIGRATING, status, f"live migration of VMI {vmi} {what} (KubeVirt: "
                                                               f"{inner})")
    who = "KubeVirt" if webhook == KUBEVIRT_INTERCEPTOR else f"admission webhook {webhook}"
    return EvictionReply(EvictionResult.BLOCKED, status, f"refused by {who}: {inner or 'no reason given'}",
                         retry_after)


class KubeEvictions:
    """Evictions, Events, the kill switch and pod listing over one KubeApi."""

    def __init__(self, api: KubeApi, *, clock: Callable[[], float] = time.time):
        self.api = api
        self.clock = clock  # wall clock, for Event timestamps and names

    async def evict(self, pod: PodRef, *, dry_run: bool, grace_seconds: int | None = None) -> EvictionReply:
        options: dict[str, Any] = {}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        if pod.uid:  # evict the pod we decided on, not a namesake created since (eviction.go honours preconditions)
            options["preconditions"] = {"uid": pod.uid}
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": pod.name, "namespace": pod.namespace}, "deleteOptions": options}
        try:
            response = await self.api.send("POST", f"{_pod_path(pod.namespace, pod.name)}/eviction",
                                           query={"dry_run": "All" if dry_run else None}, body=body)
            raw = await response.read()
        except Exception as error:  # noqa: BLE001 - "never raises": transport failures are a result
            return EvictionReply(EvictionResult.ERROR, None, _describe(error))
        reply = classify_eviction(response.status, status_body(raw), dry_run=dry_run, headers=response.headers)
        log.info("eviction of %s (dry_run=%s): %s %s", pod.key, dry_run, reply.result.value, reply.message)
        return reply

    async def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        """The pod as the API server has it now; None when it does not exist. Raises KubeError when unreadable."""
        try:
            return pod_info(await self.api.request_json("GET", _pod_path(namespace, name)))
        except KubeNotFound:
            return None

    async def get_vmi(self, namespace: str, name: str) -> VmiInfo | None:
        """The VMI as the API server has it now, its eviction strategy resolved as KubeVirt resolves it (the VMI's,
        else the KubeVirt CR's; kube/vmis.py); None when it does not exist. Raises KubeError when unreadable and
        ValueError when malformed: the caller sends nothing then."""
        path = (f"/apis/kubevirt.io/v1/namespaces/{quote(namespace, safe='')}/virtualmachineinstances/"
                f"{quote(name, safe='')}")
        try:
            body = await self.api.request_json("GET", path)
        except KubeNotFound:
            return None
        spec = body.get("spec")
        default = ""
        if not isinstance(spec, dict) or not spec.get("evictionStrategy"):
            try:
                default = await read_cluster_strategy(self.api)
            except KubeForbidden:
                default = ""  # as the VMI list reads it: unset, an eviction taken to stop the VM
        return vmi_info(body, cluster_strategy=default)

    async def record_event(self, pod: PodRef, *, reason: str, message: str, type: str = "Warning",
                           action: str = "Evict", component: str = "gpu-watchdog", host: str = "",
                           tenant: str | None = None, owner_kind: str | None = None) -> bool:
        """A core/v1 Event on the pod (what ``kubectl describe pod`` shows); False when it could not be written.
        `tenant` and `owner_kind` are kept as labels for `recent_evictions()`."""
        now = datetime.fromtimestamp(self.clock(), tz=timezone.utc)  # aware: a naive time is refused (400)
        labels = {EVENT_LABEL_REASON: _label_value(reason), EVENT_LABEL_NODE: _label_value(host),
                  EVENT_LABEL_TENANT: _label_value(tenant), EVENT_LABEL_OWNER_KIND: _label_value(owner_kind)}
        # client-go's recorder names events "<object>.<unix nanoseconds in hex>" (tools/record/event.go).
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": _present({"name": f"{pod.name}.{int(now.timestamp() * 1e9):x}", "namespace": pod.namespace,
                                  "labels": {key: value for key, value in labels.items() if value} or None}),
            "involvedObject": _present({"apiVersion": "v1", "kind": "Pod", "name": pod.name,
                                        "namespace": pod.namespace, "uid": pod.uid or None}),
            "reason": reason, "message": message[:1024], "type": type, "action": action, "count": 1,
            "source": _present({"component": component, "host": host or None}),
            "firstTimestamp": now, "lastTimestamp": now,
            "reportingComponent": component, "reportingInstance": host or component,
        }
        try:
            with kube_errors():
                response = await self.api.send("POST", f"/api/v1/namespaces/{quote(pod.namespace, safe='')}/events",
                                               body=event)
                raw = await response.read()
            if not 200 <= response.status < 300:
                raise error_for_status(response.status, status_body(raw))
        except Exception as error:  # noqa: BLE001 - an unrecorded Event must not stop an eviction cycle
            log.warning("cannot record event %s on %s: %s", reason, pod.key, _describe(error))
            return False
        return True

    async def read_kill_switch(self, namespace: str, configmap_name: str, key: str = "paused") -> bool | None:
        """True when ConfigMap data[key] is "true" (or 1/yes/on); False when it or the key is absent; None when
        the API could not be read (the caller keeps its last known state)."""
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/configmaps/{quote(configmap_name, safe='')}"
        try:
            body = await self.api.request_json("GET", path)
        except KubeNotFound:
            return False
        except Exception as error:  # noqa: BLE001
            log.warning("cannot read kill switch %s/%s: %s", namespace, configmap_name, _describe(error))
            return None
        value = (body.get("data") or {}).get(key, "")
        return str(value).strip().lower() in _TRUE

    async def recent_evictions(self, node: str, *, reasons: Iterable[str],
                               within_seconds: float) -> list[RecordedEviction]:
        """This node's Events of the given reasons on pods, written within the last `within_seconds`, oldest first.
        Events outlive nothing: the API server drops them after --event-ttl (1 h by default). Raises KubeError."""
        wanted = sorted({reason for reason in reasons if _label_value(reason)})
        if not wanted:
            return []
        selector = f"{EVENT_LABEL_REASON} in ({','.join(wanted)})"
        if _label_value(node):
            selector += f",{EVENT_LABEL_NODE}={node}"
        body = await self.api.request_json("GET", "/api/v1/events", query={"labelSelector": selector})
        now = self.clock()
        found = []
        for item in body.get("items") or []:
            record = _recorded_eviction(item, node=node, reasons=wanted, now=now)
            if record is not None and record.age_seconds <= within_seconds:
                found.append(record)
        return sorted(found, key=lambda r: -r.age_seconds)

    async def list_pods(self, *, label_selector: str | None = None, field_selector: str | None = None,
                        namespace: str | None = None) -> list[PodInfo]:
        """Pods matching the selectors, cluster-wide or in one namespace. Raises KubeError when unreadable."""
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods" if namespace else "/api/v1/pods"
        query = {key: value for key, value in (("labelSelector", label_selector), ("fieldSelector", field_selector))
                 if value is not None}
        body = await self.api.request_json("GET", path, query=query)
        return [pod_info(item) for item in body.get("items") or []]


def _recorded_eviction(item: Any, *, node: str, reasons: list[str], now: float) -> RecordedEviction | None:
    """The record an Event stands for, or None when it is not this node's attempt on a pod (or is malformed)."""
    if not isinstance(item, dict):
        return None
    involved = item.get("involvedObject") or {}
    source = item.get("source") or {}
    labels = (item.get("metadata") or {}).get("labels") or {}
    if item.get("reason") not in reasons or involved.get("kind") != "Pod" or source.get("host") != node:
        return None
    if not involved.get("name") or not involved.get("namespace"):
        return None
    stamps = [item.get("lastTimestamp"), item.get("eventTime"), item.get("firstTimestamp"),
              (item.get("metadata") or {}).get("creationTimestamp")]
    written = next((t for t in map(_epoch_or_none, stamps) if t is not None), None)
    if written is None:
        return None
    return RecordedEviction(namespace=involved["namespace"], name=involved["name"], uid=involved.get("uid") or "",
                            reason=item["reason"], age_seconds=max(0.0, now - written),
                            tenant=labels.get(EVENT_LABEL_TENANT), owner_kind=labels.get(EVENT_LABEL_OWNER_KIND))


def _epoch_or_none(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _describe(error: BaseException) -> str:
    try:
        return str(translate(error))
    except TypeError:
        return f"{type(error).__name__}: {error}"


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields that have a value: what the generated models serialised (None left out)."""
    return {key: value for key, value in fields.items() if value is not None}
