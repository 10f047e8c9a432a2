"""The floor: the pods no policy can make evictable, and the policy values that come close to trying.

A policy is a preference. Anyone who may edit its ConfigMap can hot-reload it onto every node in seconds, so a
protection that lives only there is one typo away from gone: `protected_namespaces: []` with a priority floor of
3e9 made kube-system and system-node-critical pods evictable on the agents and the controller alike. What follows
is therefore code. `eligibility.protection` consults `floor_protection` before any protection of the policy, and
every eviction path goes through it: the agent's rules (decision.py), the controller's alert selection
(controller/selection.py), and the evictor's re-check of the re-read pod right before a send (evictor.py). A
policy adds protections; it never removes these. Terminating and ended pods are refused earlier still, by
`eligibility.refusal` (results already_evicted and gone), for every policy.

The deploy/ manifests repeat part of the floor where the API server enforces it: a ValidatingAdmissionPolicy
denies pods/eviction by the agent's and the controller's service accounts in protected namespaces and in
namespaces without the opt-in label, and a cluster-wide eviction budget caps sends by all of them together.

`review()` names the policy values that are legal but dangerous (warnings: check-config prints them, a reload
logs them). The one value that can only be a mistake, a priority floor above system-cluster-critical, is refused
by the policy model itself (config/action.py), so check-config, the start and every reload refuse it alike.
PURE: no I/O, no logging.
"""

from __future__ import annotations

from dataclasses import dataclass

from watchdog.config.action import PROTECTED_ANNOTATION, SYSTEM_CLUSTER_CRITICAL, ActionPolicy
from watchdog.model import MIRROR_ANNOTATION, Mode, PodInfo

# Built-in PriorityClasses (kubernetes/website, docs/concepts/scheduling-eviction/pod-priority-preemption.md;
# scheduling/v1 PriorityClass): system-cluster-critical = 2 000 000 000, system-node-critical = 2 000 001 000. Values
# above 1 000 000 000 are reserved for them: a user-defined class may be at most USER_PRIORITY_MAX. The kubelet's
# eviction manager refuses to evict a critical pod (kubernetes pkg/kubelet/eviction/eviction_manager.go, evictPod:
# IsCriticalPod), and the descheduler's default priorityThreshold is system-cluster-critical
# (kubernetes-sigs/descheduler, pkg/descheduler/evictions/evictions.go).
SYSTEM_NODE_CRITICAL = 2_000_001_000
USER_PRIORITY_MAX = 1_000_000_000
# kube-system holds the control plane's add-ons (DNS, CNI, often the device plugin itself), and every "kube-"
# namespace is reserved for Kubernetes (kubernetes/website, docs/concepts/overview/working-with-objects/
# namespaces.md: kube-system, kube-public, kube-node-lease). The project's own namespaces hold the agents and the
# controller, which must not evict each other: "gpu-watchdog" (deploy/'s agents, Settings.namespace's default) and
# "gpu-watchdog-controller" (deploy/'s controller). A process deployed elsewhere adds its own namespace at runtime
# after every load (config/runtime.py, controller/service.py), where no policy file can take it out.
RESERVED_NAMESPACE_PREFIX = "kube-"
PROJECT_NAMESPACE = "gpu-watchdog"
FLOOR_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", PROJECT_NAMESPACE, "gpu-watchdog-controller")
# The controller kinds whose pods an eviction cannot remove: a DaemonSet pod is recreated on the same node at once
# (it relieves nothing); "Node" owns the mirror of a static pod, which the Eviction API cannot delete (the kubelet
# recreates it from its manifest; kubernetes.io/config.mirror, docs/tasks/configure-pod-container/static-pod.md).
DAEMONSET = "DaemonSet"
STATIC_OWNER = "Node"
# Above this burst the node-wide bucket lets a reload or a flapping detector evict a rack's worth of pods at once.
BURST_WARNING = 10


def floor_protection(pod: PodInfo) -> str | None:
    """Why this live pod is protected whatever the policy says, or None."""
    if pod.priority >= SYSTEM_CLUSTER_CRITICAL:
        return (f"priority {pod.priority} is at or above the hard floor {SYSTEM_CLUSTER_CRITICAL} "
                "(system-cluster-critical)")
    if always_protected_namespace(pod.namespace):
        return f"namespace {pod.namespace} is protected (always)"
    if annotated(pod, PROTECTED_ANNOTATION):
        return f"annotated {PROTECTED_ANNOTATION}=true"
    if pod.owner_kind == DAEMONSET:
        return "DaemonSet pod"
    if pod.mirror or pod.owner_kind == STATIC_OWNER or MIRROR_ANNOTATION in pod.annotations:
        return "static/mirror pod"
    return None


def always_protected_namespace(namespace: str) -> bool:
    """True for the namespaces no policy can open: Kubernetes' reserved ones and the project's own."""
    return namespace in FLOOR_NAMESPACES or namespace.startswith(RESERVED_NAMESPACE_PREFIX)


def annotated(pod: PodInfo, key: str) -> bool:
    """True when the pod carries ``key: "true"`` (any case, surrounding blanks ignored)."""
    return str(pod.annotations.get(key, "")).strip().lower() == "true"


@dataclass(frozen=True, slots=True)
class Caution:
    """A legal but dangerous policy value: the field (relative to the action policy) and why."""

    field: str
    message: str


def review(policy: ActionPolicy) -> list[Caution]:
    """The dangerous values of an action policy as written (before the runtime overlay), each with its reason."""
    cautions: list[Caution] = []
    own = [ns for ns in policy.protected_namespaces if not always_protected_namespace(ns)]
    if policy.mode is Mode.ENFORCE and not own:
        cautions.append(Caution("protected_namespaces", (
            "mode enforce with no protected namespace of the policy's own: only the kube-* namespaces and the "
            "project's are protected (always), so every other namespace's GPU pods may be evicted")))
    if policy.priority_floor > USER_PRIORITY_MAX:
        cautions.append(Caution("priority_floor", (
            f"{policy.priority_floor} is above {USER_PRIORITY_MAX}, the highest priority a user PriorityClass may "
            f"have: no user pod is protected by priority (system-critical pods stay protected, always)")))
    if policy.node_eviction_burst > BURST_WARNING:
        cautions.append(Caution("node_eviction_burst", (
            f"{policy.node_eviction_burst} evictions may go out at once from one node (more than {BURST_WARNING})")))
    for name in ("pod_cooldown_seconds", "tenant_cooldown_seconds"):
        if getattr(policy, name) == 0:
            cautions.append(Caution(name, "0: nothing holds back a repeat eviction (an eviction loop is possible)"))
    return cautions
