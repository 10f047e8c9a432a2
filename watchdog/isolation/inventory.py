"""The audit's view of the cluster, indexed once: tenants, their namespaces, GPU pods, and the nodes they run on.

A tenant is a namespace, or, with ``tenant_label``, every namespace carrying the same value of that label (a
platform that gives a team several namespaces). GPU resources are the device plugin's extended resources
(``nvidia.com/gpu``, ``nvidia.com/mig-<profile>`` with mig-strategy=mixed, ``nvidia.com/gpu.shared`` when
time-slicing renames its replicas; NVIDIA k8s-device-plugin README "Shared Access to GPUs"). A pod's request for
an extended resource equals its limit (Kubernetes docs "Managing Resources for Containers", extended resources),
so limits stand in where requests are absent. Pods that finished (Succeeded, Failed) are left out, as the quota
controller leaves them out of usage. Pure: no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from watchdog.isolation.quantity import QuantityError, parse_quantity
from watchdog.model.cluster import ClusterObjects

SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})


def is_network_resource(name: str) -> bool:
    """SR-IOV virtual functions and RDMA devices (``rdma/*``, ``*/sriov*``, ``nvidia.com/…rdma…``)."""
    return name.startswith("rdma/") or "sriov" in name or "rdma" in name


def is_gpu_resource(name: str) -> bool:
    return name.startswith("nvidia.com/") and not is_network_resource(name)


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def pod_name(pod: dict[str, Any]) -> str:
    return f"{meta(pod).get('namespace', '')}/{meta(pod).get('name', '')}"


@dataclass(frozen=True, slots=True)
class PodRequests:
    """One active pod and its extended-resource requests (summed over containers)."""

    pod: dict[str, Any]
    requests: dict[str, Decimal]
    per_container_max: dict[str, Decimal]
    problems: tuple[str, ...] = ()

    @property
    def gpu(self) -> dict[str, Decimal]:
        return {k: v for k, v in self.requests.items() if is_gpu_resource(k)}

    @property
    def node(self) -> str:
        return (self.pod.get("spec") or {}).get("nodeName") or ""


def pod_requests(pod: dict[str, Any]) -> PodRequests:
    totals: dict[str, Decimal] = defaultdict(Decimal)
    largest: dict[str, Decimal] = {}
    problems = []
    for container in (pod.get("spec") or {}).get("containers") or ():
        resources = container.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in wanted.items():
            if not (is_gpu_resource(name) or is_network_resource(name) or "/" in name):
                continue
            try:
                amount = parse_quantity(value)
            except QuantityError as error:
                problems.append(f"pod {pod_name(pod)} container {container.get('name')}: {name}: {error}")
                continue
            totals[name] += amount
            largest[name] = max(largest.get(name, Decimal(0)), amount)
    return PodRequests(pod, dict(totals), largest, tuple(problems))


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    namespaces: tuple[str, ...]


@dataclass(slots=True)
class Inventory:
    """Tenants and the lookups every check shares, built once per audit."""

    cluster: ClusterObjects
    tenants: list[Tenant]
    tenant_of: dict[str, str]  # namespace -> tenant
    pods: dict[str, list[PodRequests]]  # tenant -> active pods
    nodes: dict[str, dict[str, Any]]
    gpu_tenants_on_node: dict[str, set[str]] = field(default_factory=dict)

    def gpu_pods(self, tenant: str) -> list[PodRequests]:
        return [p for p in self.pods.get(tenant, []) if p.gpu]

    def neighbours(self, tenant: str, node: str) -> list[str]:
        """Other tenants with GPU pods on ``node``."""
        return sorted(self.gpu_tenants_on_node.get(node, set()) - {tenant})

    def gpu_neighbours(self, tenant: str, node: str) -> dict[str, list[str]] | None:
        """GPU uuid → the other tenants on that GPU, from the agents' attribution, for the GPUs of ``node`` the
        tenant uses; None when the agents reported nothing of the tenant on that node (use ``neighbours``)."""
        found: dict[str, list[str]] = {}
        for (gpu_node, gpu), namespaces in sorted(self.cluster.gpu_users.items()):
            owners = {self.tenant_of[ns] for ns in namespaces if ns in self.tenant_of}
            if gpu_node == node and tenant in owners:
                found[gpu] = sorted(owners - {tenant})
        return found or None

    def unread(self, kind: str, tenant: Tenant) -> str | None:
        """The error that left ``kind`` unread for any of the tenant's namespaces, as a report line."""
        for namespace in tenant.namespaces:
            failure = self.cluster.error(kind, namespace)
            if failure is not None:
                where = f" in namespace {failure.namespace}" if failure.namespace else ""
                return f"cannot list {kind}{where}: {failure.message}"
        return None


def build_inventory(cluster: ClusterObjects, *, tenant_label: str = "",
                    include_system: bool = False) -> Inventory:
    grouped: dict[str, list[str]] = defaultdict(list)
    for namespace in cluster.of("namespaces"):
        name = meta(namespace).get("name", "")
        if not name or (name in SYSTEM_NAMESPACES and not include_system):
            continue
        tenant = (meta(namespace).get("labels") or {}).get(tenant_label, name) if tenant_label else name
        grouped[tenant].append(name)
    tenants = [Tenant(t, tuple(sorted(ns))) for t, ns in sorted(grouped.items())]
    tenant_of = {ns: t.name for t in tenants for ns in t.namespaces}
    pods: dict[str, list[PodRequests]] = defaultdict(list)
    on_node: dict[str, set[str]] = defaultdict(set)
    for pod in cluster.of("pods"):
        tenant = tenant_of.get(meta(pod).get("namespace", ""))
        if tenant is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        try:
            requests = pod_requests(pod)
        except (AttributeError, TypeError, ValueError) as error:
            requests = PodRequests(pod, {}, {}, (f"pod {pod_name(pod)}: unexpected object shape: {error}",))
        pods[tenant].append(requests)
        if requests.gpu and requests.node:
            on_node[requests.node].add(tenant)
    nodes = {meta(n).get("name", ""): n for n in cluster.of("nodes")}
    return Inventory(cluster, tenants, tenant_of, dict(pods), nodes, dict(on_node))
