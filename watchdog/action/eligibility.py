"""Who may never be evicted: the checks every eviction path shares.

The node agent's decision rules and the Alertmanager-driven controller both go through `refusal()`, so a pod that
is protected for one is protected for the other. PURE: no I/O, no asyncio.

The protected cases follow the descheduler's defaults (kubernetes-sigs/descheduler, pkg/descheduler/evictions/
evictions.go: DaemonSet pods, mirror/static pods, pods at or above a priority threshold, pods already terminating)
plus the namespace list and the opt-out annotation of this project. The part no policy can remove is the floor
(floor.py), checked first; the policy only adds to it. A virt-launcher pod is a candidate only when KubeVirt will
live-migrate its VM (vm_rules.py), checked when the caller knows the node's VMIs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from watchdog.action.floor import annotated, floor_protection
from watchdog.action.vm_rules import vm_refusal
from watchdog.config.action import ActionPolicy
from watchdog.model import EvictionResult, PodInfo, VmiInfo


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a pod must not be evicted: the result to report and a sentence saying why."""

    result: EvictionResult
    detail: str


def refusal(pod: PodInfo, policy: ActionPolicy, *, vms: Mapping[str, VmiInfo] | None = None) -> Refusal | None:
    """The reason this pod must not be evicted, or None when it may be. `vms`: the node's VMIs by uid, to judge a
    virt-launcher pod by its VM (vm_rules.py); None where they are not known and the VM rules were applied earlier
    (the evictor's re-check of a decision)."""
    if pod.phase in ("Succeeded", "Failed"):
        return Refusal(EvictionResult.GONE, f"pod {pod.namespace}/{pod.name} already ended ({pod.phase})")
    if pod.deleting:
        return Refusal(EvictionResult.ALREADY_EVICTED, f"pod {pod.namespace}/{pod.name} is already terminating")
    protected = protection(pod, policy)
    if protected:
        return Refusal(EvictionResult.PROTECTED, protected)
    if vms is not None:
        vm = vm_refusal(pod, vms, policy.vms)
        if vm is not None:
            return Refusal(vm.result, vm.detail)
    return None


def protection(pod: PodInfo, policy: ActionPolicy) -> str | None:
    """Why a live pod is protected, or None: the floor first (no policy removes it), then what the policy adds."""
    floor = floor_protection(pod)
    if floor:
        return floor
    if pod.priority >= policy.priority_floor:
        return f"priority {pod.priority} is at or above the floor {policy.priority_floor}"
    if pod.namespace in policy.protected_namespaces:
        return f"namespace {pod.namespace} is protected"
    if annotated(pod, policy.protected_annotation):
        return f"annotated {policy.protected_annotation}=true"
    return None
