"""Which pod an eviction alert means, and the decision for it, under the same rules the node agent obeys.

Only pods on the alert's node are ever chosen. The agent judges quota (and every other finding) per node, so a
tenant over quota on node-a is relieved only by a pod on node-a, never by the tenant's lowest-priority pod on
node-b (docs/alerting.md, "Per node"). An eviction alert without `node` is
refused before anything is listed (`unplaced`; the webhook answers 400). When the alert also names a device
(`gpu_uuid` / `mig_uuid`, a breach on one GPU), it must name the pod too: the API server does not record which
device a pod was given (only the node's kubelet does, in its PodResources socket), so the controller cannot pick
among a device's pods itself and never substitutes a pod the agent did not see there. Report-only finding kinds
(model.REPORT_ONLY_KINDS) are never an eviction reason, whatever the alert asks.

An alert names a pod, or only a namespace (a tenant): then the tenant's lowest-priority GPU pod on the node is
chosen — a GPU pod being one that requests nvidia.com/gpu or an nvidia.com/mig-* resource — the youngest first
among equals, skipping protected pods as the quota rule does. While any of the tenant's GPU pods on the node is
terminating, a namespace-only alert evicts nothing: that pod may be the one a previous delivery of the same firing
evicted, and its GPUs are about to be freed anyway.

A named pod gets the same refusals, must be a GPU pod (an alert cannot make us evict a pod that holds no GPU), and
is refused (not_lower_priority) while the tenant has a lower-priority GPU pod on the node that may be evicted: the
alert's author picked a pod, but the rule the agent obeys is to free capacity at the lowest priority first (for a
device-bound alert that pod may sit on another GPU of the node: refusing then errs on the side of not evicting).

A virt-launcher pod (a KubeVirt VM) is never chosen by an alert (`unsafe`): KubeVirt answers its eviction by
migrating or by stopping the VM according to the VMI (action/vm_rules.py), which the node agent lists and the
controller does not; GPU-driven relief of a VM is the agent's.

Only a pod that holds its GPU is a candidate, named or not: phase Running on a node. A Pending pod (unschedulable,
or its containers not started) frees nothing, and eviction.go deletes a Pending pod without any PodDisruptionBudget
check (pkg/registry/core/pod/storage/eviction.go, canIgnorePDB), so picking one would end the firing as "handled"
while the breach goes on. Nor is a pod created after the firing's startsAt: a replacement (a ReplicaSet's answer to
an earlier eviction, a StatefulSet namesake) is not what the alert was about. startsAt comes from Prometheus' clock
and creationTimestamp from the API server's; both are normally NTP-synchronised.
PURE: no I/O, no asyncio.
"""

from __future__ import annotations

from typing import Iterable

from watchdog.action.eligibility import Refusal, refusal
from watchdog.action.vm_rules import is_launcher
from watchdog.config.action import ActionPolicy
from watchdog.controller.webhook import NODE_LABEL, AlertTarget
from watchdog.model import (REPORT_ONLY_KINDS, Decision, EvictionRequest, EvictionResult, PodInfo, PodRef,
                            is_gpu_resource)

def is_gpu_pod(pod: PodInfo) -> bool:
    """True when the pod requests a whole GPU (shared or not) or a MIG instance (the device plugin's resources)."""
    return any(is_gpu_resource(r) for r in pod.gpu_resources)


def holds_gpu(pod: PodInfo) -> bool:
    """True when the pod is Running on a node, i.e. its containers were started with the devices they were given."""
    return pod.phase == "Running" and bool(pod.node) and pod.live


def unplaced(target: AlertTarget) -> Decision:
    """The refusal of an eviction alert that names no node (audited and counted; the webhook answers 400)."""
    detail = (f"alert {target.alertname} asks to evict in namespace {target.namespace} but has no "
              f"{NODE_LABEL} label: quota and every other finding are judged per node, so the controller acts only "
              "on pods of the node the alert names")
    return _stop(target, EvictionResult.UNSAFE, detail, None)


def decide_alert(target: AlertTarget, pods: Iterable[PodInfo], *, policy: ActionPolicy) -> Decision:
    """The decision for one alert, given the pods of its namespace (those on other nodes are never chosen)."""
    if target.kind in REPORT_ONLY_KINDS:
        detail = f"{target.kind.value} findings are report only: never an eviction reason"
        return _stop(target, EvictionResult.NO_CANDIDATE, detail, None)
    if not target.node:
        return unplaced(target)
    tenant = [p for p in pods if p.namespace == target.namespace]
    here = [p for p in tenant if p.node == target.node]
    if target.pod is not None:
        return _decide_named(target, tenant, here, policy=policy)
    if target.device:
        detail = (f"alert names device {target.device} on {target.node} but no pod: which pods hold a device is "
                  "known to the node's kubelet, not to the API server, so the controller never guesses")
        return _stop(target, EvictionResult.UNSAFE, detail, None)
    gpu_pods = [p for p in here if is_gpu_pod(p)]
    terminating = next((p for p in gpu_pods if p.deleting), None)
    if terminating is not None:
        detail = (f"GPU pod {terminating.namespace}/{terminating.name} of the tenant on {target.node} is already "
                  "terminating")
        return _stop(target, EvictionResult.ALREADY_EVICTED, detail, terminating)
    holding = [p for p in gpu_pods if holds_gpu(p)]
    ranked = sorted((p for p in holding if p.created <= target.started), key=_eviction_order)
    if not ranked:
        detail = f"no GPU pod of namespace {target.namespace} Running on node {target.node}"
        if holding:
            detail = (f"every GPU pod of namespace {target.namespace} Running on node {target.node} was created "
                      f"after the alert's startsAt {target.starts_at}")
        return _stop(target, EvictionResult.NO_CANDIDATE, detail, None)
    first_refusal = None
    for pod in ranked:
        refused = _refusal(pod, policy)
        if refused is None:
            return _go(target, pod)
        first_refusal = first_refusal or _stop(target, refused.result, refused.detail, pod)
    return first_refusal


def _decide_named(target: AlertTarget, tenant: list[PodInfo], here: list[PodInfo], *, policy: ActionPolicy) -> Decision:
    named = [p for p in tenant if p.name == target.pod]
    if not named:
        return _stop(target, EvictionResult.GONE, f"pod {target.namespace}/{target.pod} not found", None)
    candidate = named[0]
    where = f"{candidate.namespace}/{candidate.name}"
    if candidate.node and candidate.node != target.node:
        detail = f"pod {where} runs on node {candidate.node}, not on {target.node} where the alert fired"
        return _stop(target, EvictionResult.NO_CANDIDATE, detail, None)
    if not is_gpu_pod(candidate):
        detail = f"pod {where} requests no GPU; an alert never evicts a non-GPU pod"
        return _stop(target, EvictionResult.NO_CANDIDATE, detail, None)
    refused = _refusal(candidate, policy)
    if refused:
        return _stop(target, refused.result, refused.detail, candidate)
    if not holds_gpu(candidate):
        detail = (f"pod {where} is not Running on a node (phase {candidate.phase}, node {candidate.node or 'none'}): "
                  "it holds no GPU")
        return _stop(target, EvictionResult.NO_CANDIDATE, detail, None)
    if candidate.created > target.started:
        detail = f"pod {where} was created after the alert's startsAt {target.starts_at}: it is not what fired"
        return _stop(target, EvictionResult.NO_CANDIDATE, detail, None)
    lower = sorted(
        (p for p in here if is_gpu_pod(p) and holds_gpu(p) and p.priority < candidate.priority
         and _refusal(p, policy) is None),
        key=_eviction_order,
    )
    if lower:
        detail = (f"{lower[0].namespace}/{lower[0].name} (priority {lower[0].priority}) is a lower-priority GPU pod "
                  f"of the tenant on {target.node} than {candidate.name} (priority {candidate.priority})")
        return _stop(target, EvictionResult.NOT_LOWER_PRIORITY, detail, candidate)
    return _go(target, candidate)


def _refusal(pod: PodInfo, policy: ActionPolicy) -> Refusal | None:
    """The agent's refusals (eligibility.refusal), and one of the controller's own: a virt-launcher pod is never
    chosen, named or not, since whether its eviction migrates or stops the VM depends on its VMI, which only the node
    agent reads."""
    if is_launcher(pod):
        return Refusal(EvictionResult.UNSAFE, f"pod {pod.namespace}/{pod.name} runs a KubeVirt VM: whether evicting it "
                       "migrates or stops the VM depends on its VMI, which only the node agent reads; an alert never "
                       "evicts a VM")
    return refusal(pod, policy)


def _eviction_order(pod: PodInfo) -> tuple[int, float]:
    return (pod.priority, -pod.created)


def _request(target: AlertTarget, pod: PodInfo) -> EvictionRequest:
    evidence: dict[str, float | int | str] = {"alertname": target.alertname, "fingerprint": target.fingerprint}
    evidence["startsAt"] = target.starts_at
    for name, value in (("node", target.node), ("gpu_uuid", target.gpu_uuid), ("mig_uuid", target.mig_uuid)):
        if value:
            evidence[name] = value
    message = target.summary or f"alert {target.alertname} asked to evict in namespace {target.namespace}"
    return EvictionRequest(
        pod=PodRef(pod.namespace, pod.name, pod.uid),
        priority=pod.priority,
        finding_key=target.finding_key,
        finding_kind=target.kind,
        reason="alert",
        evidence=evidence,
        message=message,
    )


def _go(target: AlertTarget, pod: PodInfo) -> Decision:
    return Decision(target.finding_key, target.kind, _request(target, pod), None, "alert", pod.namespace, pod.name,
                    node=target.node)


def _stop(target: AlertTarget, result: EvictionResult, detail: str, pod: PodInfo | None) -> Decision:
    return Decision(
        finding_key=target.finding_key,
        finding_kind=target.kind,
        request=_request(target, pod) if pod else None,
        result=result,
        reason="alert",
        namespace=target.namespace,
        pod=pod.name if pod else (target.pod or ""),
        detail=detail,
        node=target.node,
    )
