"""Pod semantics of the fake API server: admission on create, graceful deletion, and the eviction subresource.

These are the behaviours the watchdog's safety depends on, so each follows a named Kubernetes code path:
- create: pkg/registry/core/pod/strategy.go PrepareForCreate resets status to Pending and sets qosClass;
  plugin/pkg/admission/priority/admission.go resolves spec.priority from priorityClassName (403 when the class
  does not exist, or when spec.priority disagrees with it; the globalDefault class, else 0, when no class is named).
- delete: strategy.go CheckGracefulDelete: grace from DeleteOptions, else terminationGracePeriodSeconds; 0 for pods
  never scheduled or already terminal. A graceful delete sets deletionTimestamp (a MODIFIED event) and the object
  goes (DELETED) when the kubelet confirms, modelled as a timer, ``finish_deletions()``, or at once with
  ``instant_deletes``.
- eviction: pkg/registry/core/pod/storage/eviction.go (see apiserver_pdb for the PDB part). Validating admission
  webhooks run before it; ``interceptors`` stand for them (KubeVirt's, kubevirt_eviction.py), each raising its
  denial.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any, Callable

from watchdog.testbed.cluster.apiserver_pdb import PdbState, decide_eviction
from watchdog.testbed.cluster.apiserver_store import (PDBS, PODS, PRIORITY_CLASSES, ApiError, Store, not_found, rfc3339,
                                            status_body)


def qos_class(spec: dict[str, Any]) -> str:
    """pkg/apis/core/helper/qos GetPodQOS, for cpu and memory only."""
    requests_seen = limits_seen = False
    guaranteed = True
    for container in spec.get("containers") or ():
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        requests_seen |= any(k in requests for k in ("cpu", "memory"))
        limits_seen |= any(k in limits for k in ("cpu", "memory"))
        for key in ("cpu", "memory"):
            if key not in limits or requests.get(key, limits[key]) != limits[key]:
                guaranteed = False
    if not requests_seen and not limits_seen:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def dry_run_of(values: list[str]) -> bool:
    for value in values:
        if value != "All":
            raise ApiError(400, f'dryRun: Unsupported value: "{value}": supported values: "All"', reason="BadRequest")
    return bool(values)


class PodLogic:
    def __init__(self, store: Store, *, deletion_delay: float | None, instant_deletes: bool,
                 unobserved_pdbs: set[str]):
        self.store = store
        self.deletion_delay = deletion_delay
        self.instant_deletes = instant_deletes
        self.unobserved_pdbs = unobserved_pdbs
        self.pdbs = PdbState(store, unobserved=unobserved_pdbs)
        # Admission webhooks on pods/eviction, called with (pod, dry_run=) before the PDB check; raise ApiError to deny.
        self.interceptors: list[Callable[..., None]] = []
        self._pending: dict[tuple[str, str], asyncio.TimerHandle] = {}

    # ------------------------------------------------------------------ create
    def admit(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"].get("name", "")
        spec = pod.setdefault("spec", {})
        if not spec.get("containers"):
            raise ApiError(422, f'Pod "{name}" is invalid: spec.containers: Required value', reason="Invalid")
        class_name = spec.get("priorityClassName")
        if class_name:
            found = self.store.get(PRIORITY_CLASSES, "", class_name)
            if found is None:
                raise ApiError(403, f'pods "{name}" is forbidden: no PriorityClass with name {class_name} was found')
            value = int(found.get("value", 0))
        else:
            default = [pc for pc in self.store.list(PRIORITY_CLASSES) if pc.get("globalDefault")]
            value = int(default[0].get("value", 0)) if default else 0
            if default:
                spec["priorityClassName"] = default[0]["metadata"]["name"]
        if spec.get("priority") is not None and spec["priority"] != value:
            raise ApiError(403, f'pods "{name}" is forbidden: the integer value of priority ({spec["priority"]}) '
                                f'must not be provided in pod spec; priority admission controller computed {value} '
                                'from the given PriorityClass name')
        spec["priority"] = value
        spec.setdefault("terminationGracePeriodSeconds", 30)
        pod["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}

    # ------------------------------------------------------------------ delete
    def delete(self, namespace: str, name: str, options: dict[str, Any], *, dry_run: bool) -> dict[str, Any]:
        pod = self.store.get(PODS, namespace, name)
        if pod is None:
            raise not_found(PODS, name)
        preconditions = options.get("preconditions") or {}
        for key, meta_key in (("uid", "uid"), ("resourceVersion", "resourceVersion")):
            if preconditions.get(key) and preconditions[key] != pod["metadata"].get(meta_key):
                raise ApiError(409, f"Precondition failed: {key}: {preconditions[key]}, "
                                    f"{key} in object meta: {pod['metadata'].get(meta_key)}", reason="Conflict")
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        phase = (pod.get("status") or {}).get("phase")
        if not (pod.get("spec") or {}).get("nodeName") or phase in ("Succeeded", "Failed"):
            grace = 0
        if dry_run:
            return pod
        if grace == 0 or self.instant_deletes:
            self._cancel(namespace, name)
            return self.store.remove(PODS, namespace, name)
        if pod["metadata"].get("deletionTimestamp"):
            return pod  # already terminating: a second graceful delete changes nothing here
        pod["metadata"]["deletionTimestamp"] = rfc3339(self.store.clock() + grace)
        pod["metadata"]["deletionGracePeriodSeconds"] = int(grace)
        updated = self.store.update(PODS, pod)
        delay = self.deletion_delay if self.deletion_delay is not None else float(grace)
        handle = asyncio.get_running_loop().call_later(delay, self._finish, namespace, name)
        self._pending[(namespace, name)] = handle
        return updated

    def _finish(self, namespace: str, name: str) -> None:
        self._pending.pop((namespace, name), None)
        if self.store.get(PODS, namespace, name) is not None:
            self.store.remove(PODS, namespace, name)

    def _cancel(self, namespace: str, name: str) -> None:
        handle = self._pending.pop((namespace, name), None)
        if handle is not None:
            handle.cancel()

    def finish_deletions(self) -> int:
        """Complete every graceful deletion now, as if each kubelet confirmed; returns how many."""
        keys = list(self._pending)
        for key in keys:
            self._cancel(*key)
            self._finish(*key)
        return len(keys)

    def cancel_all(self) -> None:
        for key in list(self._pending):
            self._cancel(*key)

    # ------------------------------------------------------------------ eviction
    def evict(self, namespace: str, name: str, body: dict[str, Any],
              query_dry_run: list[str]) -> tuple[int, dict[str, Any], dict[str, str]]:
        if body.get("kind") not in (None, "Eviction"):
            raise ApiError(400, f"expected an Eviction, got {body.get('kind')}")
        if (body.get("metadata") or {}).get("name") != name:
            raise ApiError(400, "name in URL does not match name in Eviction object")
        options = body.get("deleteOptions") or {}
        body_dry_run = options.get("dryRun") or []
        if query_dry_run and body_dry_run and list(query_dry_run) != list(body_dry_run):
            # eviction.go: "the dryRun value in the request and in the DeleteOptions must match" (400).
            raise ApiError(400, "DryRun in the request and in the Eviction's DeleteOptions do not match")
        dry_run = dry_run_of(list(query_dry_run) or list(body_dry_run))
        pod = self.store.get(PODS, namespace, name)
        if pod is None:
            raise not_found(PODS, name)
        for intercept in self.interceptors:
            intercept(pod, dry_run=dry_run)
        verdict = decide_eviction(pod, self.store.list(PDBS, namespace), self.store.list(PODS, namespace),
                                  state=self.pdbs)
        if not verdict.allowed:
            headers = {"Retry-After": str(verdict.retry_after)} if verdict.retry_after else {}
            return verdict.http_code, verdict.status or {}, headers
        if verdict.consumes is not None and not dry_run:
            self.pdbs.record_disruption(verdict.consumes, name)  # checkAndDecrement, before the delete
        self.delete(namespace, name, options, dry_run=dry_run)
        return 201, status_body(201, "", success=True), {}


def container_id() -> str:
    return "containerd://" + secrets.token_hex(32)


def build_pod(*, namespace: str, name: str, node: str, priority: int, priority_class: str,
              labels: dict[str, str], annotations: dict[str, str], phase: str, ready: bool,
              containers: list[str] | list[dict], owner_kind: str | None, qos: str,
              requests: dict[str, str] | None) -> dict[str, Any]:
    """A pod as it looks once scheduled and started by a kubelet (what ``add_pod`` stores)."""
    specs = [c if isinstance(c, dict) else {"name": c, "image": "registry.local/app:1"} for c in containers]
    if requests:
        for spec in specs:
            spec.setdefault("resources", {}).setdefault("requests", dict(requests))
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels),
                            "annotations": dict(annotations)}
    if owner_kind:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner_kind, "name": f"{name}-owner",
                                    "uid": secrets.token_hex(8), "controller": True}]
    # The container state the kubelet reports for the phase (what `kubectl get`'s STATUS and `describe` show).
    state = {"Running": {"running": {}}, "Succeeded": {"terminated": {"exitCode": 0, "reason": "Completed"}},
             "Failed": {"terminated": {"exitCode": 1, "reason": "Error"}}}.get(
        phase, {"waiting": {"reason": "ContainerCreating"}})
    statuses = [{"name": c["name"], "ready": ready, "restartCount": 0, "image": c.get("image", ""),
                 "imageID": "", "containerID": container_id() if phase == "Running" else None,
                 "started": phase == "Running", "state": state} for c in specs]
    return {
        "metadata": meta,
        "spec": {"nodeName": node, "containers": specs, "priority": priority,
                 **({"priorityClassName": priority_class} if priority_class else {}),
                 "terminationGracePeriodSeconds": 30},
        "status": {"phase": phase, "qosClass": qos,
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                   "containerStatuses": statuses},
    }

