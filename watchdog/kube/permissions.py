"""Every Kubernetes API call gpu-watchdog makes, in one table that the client enforces and RBAC is checked against.

RBAC that grants more than the code uses is a standing risk (a compromised GPU node holds the agent's token); RBAC
that grants less fails in production only, on the first eviction. So the calls are declared here once, per identity
(the node agent and the controller, each with its own ServiceAccount), and:

- ``KubeApi`` built for the agent or the controller (``KubeApi.from_settings``) refuses, before sending, any call
  whose (API group, resource, verb) is not in ``PERMISSIONS`` (``KubeCallNotDeclared``);
- tests/deploy/test_permissions.py checks that the Helm chart's Roles and ClusterRoles grant each identity exactly
  its rows, resource names included.

Verbs are the authorizer's (Kubernetes docs, "Authorization", "Determine the Request Verb"): GET of one object is
``get``, of a collection ``list`` (``watch`` with ``?watch=true``), POST ``create``, PUT ``update``, PATCH
``patch``, DELETE ``delete``. The client checks group, resource and verb; names are RBAC's to check, since the kill
switch's and the budget's names are policy settings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from watchdog.kube.errors import KubeError

Identity = Literal["agent", "controller"]
# Where a grant applies: cluster-wide (a ClusterRole), or a Role in the agents' or the controller's namespace.
Scope = Literal["cluster", "agent-namespace", "controller-namespace"]

KILL_SWITCH = "gpu-watchdog-kill-switch"  # config/action.py KillSwitchPolicy.name's default
EVICTION_BUDGET = "gpu-watchdog-eviction-budget"  # config/action.py ClusterBudgetPolicy.name's default
HANDLED_FIRINGS = "gpu-watchdog-controller-handled"  # config/controller.py handled_configmap's default


@dataclass(frozen=True)
class Permission:
    identity: Identity
    scope: Scope
    group: str  # "" is the core group
    resource: str  # "pods", or "pods/eviction" for a subresource
    verb: str
    names: tuple[str, ...] = ()  # RBAC resourceNames; () is every object
    why: str = ""


def _rows(identity: Identity, scope: Scope, group: str, resource: str, verbs: str, why: str,
          names: tuple[str, ...] = ()) -> list[Permission]:
    return [Permission(identity, scope, group, resource, verb, names, why) for verb in verbs.split()]


PERMISSIONS: tuple[Permission, ...] = tuple([
    # ---- the node agent (kube/pods.py, kube/resourceslices.py, kube/node_labels.py, kube/vmis.py, kube/eviction.py,
    # kube/eviction_budget.py)
    *_rows("agent", "cluster", "", "pods", "list watch", "its node's pods (field selector spec.nodeName)"),
    *_rows("agent", "cluster", "", "pods", "get", "the pod re-read just before an eviction is sent"),
    *_rows("agent", "cluster", "", "pods/eviction", "create", "evictions (policy/v1, so PodDisruptionBudgets hold)"),
    *_rows("agent", "cluster", "", "events", "create", "an Event on each pod it acts on"),
    *_rows("agent", "cluster", "", "events", "list", "its recent evictions, restored after a restart"),
    *_rows("agent", "cluster", "resource.k8s.io", "resourceslices", "list watch",
           "its node's DRA ResourceSlices (devices allocated through Dynamic Resource Allocation)"),
    *_rows("agent", "cluster", "", "nodes", "get",
           "its own Node's GPU Feature Discovery labels: how the device plugin shares its GPUs"),
    *_rows("agent", "cluster", "kubevirt.io", "virtualmachineinstances", "list",
           "its node's KubeVirt VMIs (label kubevirt.io/nodeName), to name each vGPU's VMI and virt-launcher pod"),
    *_rows("agent", "cluster", "kubevirt.io", "virtualmachineinstances", "get",
           "a virt-launcher pod's VMI re-read just before its eviction is sent (whether it migrates or stops)"),
    *_rows("agent", "cluster", "kubevirt.io", "kubevirts", "list",
           "the KubeVirt CR's default evictionStrategy, for VMIs without their own (whether an eviction migrates)"),
    *_rows("agent", "agent-namespace", "", "configmaps", "get", "the kill switch", (KILL_SWITCH,)),
    *_rows("agent", "agent-namespace", "", "configmaps", "get update", "the cluster-wide eviction budget",
           (EVICTION_BUDGET,)),
    # ---- the controller (kube/eviction.py, kube/lease.py, kube/eviction_budget.py, controller/ledger.py)
    *_rows("controller", "cluster", "", "pods", "get list", "the alert's candidate pods, re-read before a send"),
    *_rows("controller", "cluster", "", "pods/eviction", "create", "evictions"),
    *_rows("controller", "cluster", "", "events", "create", "an Event on each pod it acts on"),
    # the tenant isolation audit (kube/cluster_read.py): lists only, per namespace or cluster-wide
    *[row for resource in ("namespaces", "nodes", "resourcequotas", "limitranges", "persistentvolumeclaims")
      for row in _rows("controller", "cluster", "", resource, "list", "the tenant isolation audit")],
    *_rows("controller", "cluster", "networking.k8s.io", "networkpolicies", "list", "the tenant isolation audit"),
    *_rows("controller", "cluster", "storage.k8s.io", "storageclasses", "list", "the tenant isolation audit"),
    *_rows("controller", "cluster", "scheduling.k8s.io", "priorityclasses", "list", "the tenant isolation audit"),
    *_rows("controller", "cluster", "resource.k8s.io", "resourceclaims", "list",
           "the tenant isolation audit (GPU device-class quotas of DRA tenants)"),
    *_rows("controller", "cluster", "kubevirt.io", "virtualmachineinstances", "list",
           "the tenant isolation audit (vGPU VMs that cannot live-migrate)"),
    *_rows("controller", "controller-namespace", "", "configmaps", "get update", "its handled-firings record",
           (HANDLED_FIRINGS,)),
    # The tenant isolation audit the leader runs (controller/isolation_audit.py, kube/cluster_read.py): read only.
    *[row for group, resource in (("", "namespaces"), ("", "nodes"), ("", "resourcequotas"), ("", "limitranges"),
                                  ("", "persistentvolumeclaims"), ("storage.k8s.io", "storageclasses"),
                                  ("scheduling.k8s.io", "priorityclasses"), ("networking.k8s.io", "networkpolicies"))
      for row in _rows("controller", "cluster", group, resource, "list", "the tenant isolation audit")],
    # create cannot be limited by resourceNames: the authorizer sees no name before the object exists.
    *_rows("controller", "controller-namespace", "", "configmaps", "create", "its handled-firings record, once"),
    *_rows("controller", "controller-namespace", "coordination.k8s.io", "leases", "get create update",
           "leader election"),
    *_rows("controller", "agent-namespace", "", "configmaps", "get", "the kill switch (never written)",
           (KILL_SWITCH,)),
    *_rows("controller", "agent-namespace", "", "configmaps", "get update", "the cluster-wide eviction budget",
           (EVICTION_BUDGET,)),
])

DECLARED: frozenset[tuple[str, str, str]] = frozenset((p.group, p.resource, p.verb) for p in PERMISSIONS)

# The generated client's operations production code calls, by name without the _without_preload_content/
# _with_http_info suffix → (group, resource, verb). None: every call goes out as a raw request (KubeApi.send,
# request_json) checked by its path, so the generated API classes, which hold every model of their group in memory
# (CoreV1Api alone is 24 MiB resident), are never loaded by the agent. A generated operation called anyway is refused.
CLIENT_OPERATIONS: dict[str, tuple[str, str, str]] = {}

_HTTP_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
# /api/v1/[namespaces/<ns>/]<resource>[/<name>[/<subresource>]] and /apis/<group>/<version>/… (the API server's
# request path layout, apiserver/pkg/endpoints/request/requestinfo.go).
_PATH = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/[^/]+)?/(?P<resource>[^/?]+)"
                   r"(?:/(?P<name>[^/?]+)(?:/(?P<sub>[^/?]+))?)?/?$")


class KubeCallNotDeclared(KubeError):
    """A call that watchdog/kube/permissions.py does not list: RBAC would refuse it, so it is never sent."""


def operation_request(operation: str, *, watch: bool = False) -> tuple[str, str, str]:
    """(group, resource, verb) of a generated-client operation; raises KubeCallNotDeclared when unknown."""
    name = operation.removesuffix("_without_preload_content").removesuffix("_with_http_info")
    if name not in CLIENT_OPERATIONS:
        raise KubeCallNotDeclared(f"API operation {name} is not in watchdog/kube/permissions.py")
    group, resource, verb = CLIENT_OPERATIONS[name]
    return group, resource, "watch" if watch and verb == "list" else verb


def path_request(method: str, path: str, *, query: dict[str, str] | None = None) -> tuple[str, str, str]:
    """(group, resource, verb) of a raw request; raises KubeCallNotDeclared when the path is not an API path."""
    match = _PATH.match(path)
    if not match:
        raise KubeCallNotDeclared(f"{method} {path} is not a resource path")
    resource = match["resource"] + (f"/{match['sub']}" if match["sub"] else "")
    if method == "GET":
        verb = "get" if match["name"] else ("watch" if (query or {}).get("watch") in ("true", "1") else "list")
    else:
        verb = _HTTP_VERBS.get(method, method.lower())
    return match["group"] or "", resource, verb


def check_declared(request: tuple[str, str, str]) -> None:
    if request not in DECLARED:
        group, resource, verb = request
        raise KubeCallNotDeclared(
            f"{verb} {resource}{'.' + group if group else ''} is not in watchdog/kube/permissions.py "
            "(and so not granted by the chart's RBAC)")


class DeclaredOperations:
    """A generated API object (``CoreV1Api``…) whose operations are checked against PERMISSIONS before sending."""

    def __init__(self, api: object):
        self._api = api

    def __getattr__(self, name: str):
        attribute = getattr(self._api, name)
        if name.startswith("_") or not callable(attribute):
            return attribute

        def checked(*args, **kwargs):
            check_declared(operation_request(name, watch=bool(kwargs.get("watch"))))
            return attribute(*args, **kwargs)

        return checked
