"""Network boundaries: a default-deny NetworkPolicy per tenant, and the SR-IOV / RDMA devices its pods hold.

Default deny (Kubernetes docs "Network Policies", "Default policies"): a policy whose podSelector is empty selects
every pod of the namespace; listing "Ingress" (or "Egress") in policyTypes with no ingress (egress) rules denies
all of that direction, and other policies then add explicit allows. policyTypes defaults to Ingress, plus Egress
when egress rules are present. Egress isolation is enforced only by CNIs that implement it, which the API does not
reveal, so a namespace denying ingress but not egress is warned, not failed.
SR-IOV virtual functions (``*/sriov*`` resources of the SR-IOV network device plugin) are handed to one pod each;
RDMA devices of the k8s-rdma-shared-dev-plugin (``rdma/hca_shared_devices_*``) are shared by every pod on the
node that requests them, so the tenants sharing one are named. Pure: no I/O.
"""

from __future__ import annotations

from collections import defaultdict

from watchdog.isolation.inventory import Inventory, Tenant, is_network_resource, meta
from watchdog.isolation.results import ERROR, FAIL, INFO, PASS, WARN, CheckResult


def _denies(policy: dict) -> set[str]:
    spec = policy.get("spec") or {}
    selector = spec.get("podSelector") or {}
    if selector.get("matchLabels") or selector.get("matchExpressions"):
        return set()
    types = spec.get("policyTypes") or (["Ingress"] + (["Egress"] if spec.get("egress") else []))
    return {t for t in types if t in ("Ingress", "Egress") and not spec.get(t.lower())}


def default_deny_policy(namespace: str) -> dict:
    """Deny all ingress and egress to every pod of ``namespace``; explicit allows (DNS first) go in other policies."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "gpu-watchdog-default-deny", "namespace": namespace},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}


def check_default_deny(inventory: Inventory, tenant: Tenant) -> list[CheckResult]:
    unread = inventory.unread("networkpolicies", tenant)
    if unread:
        return [CheckResult(tenant.name, "default-deny", ERROR, unread)]
    results = []
    for namespace in tenant.namespaces:
        denied: dict[str, list[str]] = defaultdict(list)
        for policy in inventory.cluster.of("networkpolicies", namespace):
            for direction in _denies(policy):
                denied[direction].append(meta(policy).get("name", ""))
        if "Ingress" not in denied:
            result, evidence = FAIL, f"{namespace}: no default-deny ingress policy"
        elif "Egress" not in denied:
            result, evidence = WARN, f"{namespace}: ingress denied by {denied['Ingress'][0]}; egress open"
        else:
            result = PASS
            evidence = f"{namespace}: ingress denied by {denied['Ingress'][0]}, egress by {denied['Egress'][0]}"
        fix = default_deny_policy(namespace) if result != PASS else None
        results.append(CheckResult(tenant.name, "default-deny", result, evidence, fix))
    return results


def check_rdma_sriov(inventory: Inventory, tenant: Tenant) -> list[CheckResult]:
    unread = inventory.unread("pods", tenant)
    if unread:
        return [CheckResult(tenant.name, "rdma-sriov", ERROR, unread)]
    holders: dict[tuple[str, str], set[str]] = defaultdict(set)  # (node, resource) -> tenants
    for owner, pods in inventory.pods.items():
        for pod in pods:
            for name in pod.requests:
                if is_network_resource(name) and pod.node:
                    holders[(pod.node, name)].add(owner)
    mine = sorted({(pod.node, name) for pod in inventory.pods.get(tenant.name, [])
                   for name in pod.requests if is_network_resource(name)})
    if not mine:
        return [CheckResult(tenant.name, "rdma-sriov", PASS, "no SR-IOV or RDMA resources requested")]
    lines = []
    for node, name in mine:
        others = sorted(holders[(node, name)] - {tenant.name})
        if "sriov" in name:
            lines.append(f"{name} on {node}: dedicated virtual functions")
        elif others:
            lines.append(f"{name} on {node}: shared device, also used by {', '.join(others)}")
        else:
            lines.append(f"{name} on {node}: shared device, no other tenant on it now")
    return [CheckResult(tenant.name, "rdma-sriov", INFO, "; ".join(lines))]
