"""Where a tenant's GPU pods land: node pools, the sharing mode the nodes give them, priorities, driver versions.

Node labels are those of GPU Feature Discovery, now part of the NVIDIA k8s-device-plugin (README "Generated
Labels", "Shared Access to GPUs"): ``nvidia.com/gpu.sharing-strategy`` (none | time-slicing | mps),
``nvidia.com/gpu.replicas``, ``nvidia.com/mig.strategy`` (none | single | mixed), ``nvidia.com/gpu.product``
(suffixed ``-SHARED`` when replicas are advertised) and the driver version as ``nvidia.com/cuda.driver-version.full``
or, on older releases, ``nvidia.com/cuda.driver.major/.minor/.rev``; ``nvidia.com/mig.config`` is the GPU
operator's MIG manager layout. Without the agents' per-GPU attribution the audit knows pods' nodes, not their GPUs,
so neighbours are named per node. Pods of equal priority can never be each other's interference culprits
(the eviction policy only evicts lower-priority pods), so GPU neighbours with the same priority are warned.
Pure: no I/O.
"""

from __future__ import annotations

from collections import defaultdict

from watchdog.isolation.inventory import Inventory, PodRequests, Tenant, pod_name
from watchdog.isolation.results import ERROR, FAIL, INFO, PASS, WARN, CheckResult

RESERVED_LABEL = "gpu-watchdog.io/reserved-for"


def _labels(inventory: Inventory, node: str) -> dict[str, str]:
    return ((inventory.nodes.get(node) or {}).get("metadata") or {}).get("labels") or {}


def _bound(pod: PodRequests, taints: list[dict]) -> bool:
    spec = pod.pod.get("spec") or {}
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {})
    if spec.get("nodeSelector") or affinity.get("requiredDuringSchedulingIgnoredDuringExecution"):
        return True
    keys = {t.get("key") for t in taints if t.get("effect") in ("NoSchedule", "NoExecute")}
    return any(t.get("key") in keys or (t.get("operator") == "Exists" and not t.get("key"))
               for t in spec.get("tolerations") or ()) and bool(keys)


def check_node_pool(inventory: Inventory, tenant: Tenant, *, reserved_label: str = RESERVED_LABEL) -> list[CheckResult]:
    unread = inventory.unread("pods", tenant) or (inventory.unread("nodes", tenant))
    if unread:
        return [CheckResult(tenant.name, "node-pool", ERROR, unread)]
    pods = inventory.gpu_pods(tenant.name)
    if not pods:
        return [CheckResult(tenant.name, "node-pool", PASS, "no GPU pods")]
    unbound, trespassing = [], []
    for pod in pods:
        node = inventory.nodes.get(pod.node) or {}
        if not _bound(pod, (node.get("spec") or {}).get("taints") or []):
            unbound.append(pod_name(pod.pod))
        owner = _labels(inventory, pod.node).get(reserved_label)
        if owner and owner != tenant.name:
            trespassing.append(f"{pod_name(pod.pod)} on {pod.node} (reserved for {owner})")
    lines = []
    if trespassing:
        lines.append("on nodes reserved for another tenant: " + ", ".join(trespassing))
    if unbound:
        lines.append("no toleration for the node's taint, nodeSelector or required node affinity: "
                     + ", ".join(unbound))
    if not lines:
        return [CheckResult(tenant.name, "node-pool", PASS, f"{len(pods)} GPU pod(s), all bound to their node pool")]
    return [CheckResult(tenant.name, "node-pool", FAIL, "; ".join(lines))]


def sharing_mode(labels: dict[str, str], pod: PodRequests) -> str:
    """``mig``, ``time-slicing``, ``mps`` or ``exclusive``: what this pod's GPU resources give it on this node."""
    if any(name.startswith("nvidia.com/mig-") for name in pod.gpu):
        return "mig"
    strategy = labels.get("nvidia.com/gpu.sharing-strategy", "")
    if strategy in ("time-slicing", "mps"):
        return strategy
    if "nvidia.com/gpu.shared" in pod.gpu:
        return "time-slicing"
    if labels.get("nvidia.com/mig.strategy") == "single" and labels.get("nvidia.com/mig.config") != "all-disabled":
        return "mig"
    return "exclusive"


def _sharing(inventory: Inventory, tenant: str, node: str) -> str:
    """Who the tenant shares with on ``node``: per GPU from the agents' attribution, else every GPU tenant there."""
    per_gpu = inventory.gpu_neighbours(tenant, node)
    if per_gpu is not None:
        return "".join(f", {gpu} shared with {', '.join(others)}" if others else f", {gpu} not shared now"
                       for gpu, others in per_gpu.items())
    neighbours = inventory.neighbours(tenant, node)
    return f", shared with {', '.join(neighbours)}" if neighbours else ", no other tenant on it now"


def check_sharing_mode(inventory: Inventory, tenant: Tenant) -> list[CheckResult]:
    unread = inventory.unread("pods", tenant) or inventory.unread("nodes", tenant)
    if unread:
        return [CheckResult(tenant.name, "sharing-mode", ERROR, unread)]
    modes: dict[tuple[str, str], int] = defaultdict(int)
    for pod in inventory.gpu_pods(tenant.name):
        modes[(pod.node, sharing_mode(_labels(inventory, pod.node), pod))] += 1
    if not modes:
        return [CheckResult(tenant.name, "sharing-mode", PASS, "no GPU pods")]
    lines, shared = [], False
    for (node, mode), count in sorted(modes.items()):
        labels = _labels(inventory, node)
        product = labels.get("nvidia.com/gpu.product", "unknown GPU")
        line = f"{node} ({product}): {mode}"
        if mode in ("time-slicing", "mps"):
            shared = True
            line += f" x{labels.get('nvidia.com/gpu.replicas', '?')}, no memory or fault isolation"
            line += _sharing(inventory, tenant.name, node)
        lines.append(line)
    return [CheckResult(tenant.name, "sharing-mode", WARN if shared else PASS, "; ".join(lines))]


def check_mig_power(inventory: Inventory, tenant: Tenant) -> list[CheckResult]:
    unread = inventory.unread("pods", tenant)
    if unread:
        return [CheckResult(tenant.name, "mig-power", ERROR, unread)]
    mig_tenants: dict[str, set[str]] = defaultdict(set)
    for owner in inventory.pods:
        for pod in inventory.gpu_pods(owner):
            if sharing_mode(_labels(inventory, pod.node), pod) == "mig":
                mig_tenants[pod.node].add(owner)
    lines = []
    for node, owners in sorted(mig_tenants.items()):
        per_gpu = inventory.gpu_neighbours(tenant.name, node)
        if tenant.name in owners and per_gpu is not None:  # the agents say which GPU: name it
            lines += [f"{node} {gpu}: MIG instances next to {', '.join(others)}'s"
                      for gpu, others in per_gpu.items() if others]
        elif tenant.name in owners and owners - {tenant.name}:
            lines.append(f"{node}: MIG instances next to {', '.join(sorted(owners - {tenant.name}))}'s")
    if not lines:
        return [CheckResult(tenant.name, "mig-power", PASS, "no MIG instance next to another tenant's")]
    return [CheckResult(tenant.name, "mig-power", INFO, "; ".join(lines)
                        + " (one board's power, cooling and PCIe)")]


def _priority(inventory: Inventory, pod: PodRequests) -> int:
    spec = pod.pod.get("spec") or {}
    if isinstance(spec.get("priority"), int):
        return spec["priority"]
    for priority_class in inventory.cluster.of("priorityclasses"):
        if (priority_class.get("metadata") or {}).get("name") == spec.get("priorityClassName"):
            return int(priority_class.get("value") or 0)
    return 0


def check_priority(inventory: Inventory, tenant: Tenant) -> list[CheckResult]:
    unread = inventory.unread("pods", tenant)
    if unread:
        return [CheckResult(tenant.name, "priority", ERROR, unread)]
    pods = inventory.gpu_pods(tenant.name)
    if not pods:
        return [CheckResult(tenant.name, "priority", PASS, "no GPU pods")]
    lines = []
    unclassed = [pod_name(p.pod) for p in pods if not (p.pod.get("spec") or {}).get("priorityClassName")]
    if unclassed:
        lines.append("no PriorityClass: " + ", ".join(unclassed))
    for node in sorted({p.node for p in pods if p.node}):
        mine = {_priority(inventory, p) for p in pods if p.node == node}
        for other in inventory.neighbours(tenant.name, node):
            theirs = {_priority(inventory, p) for p in inventory.gpu_pods(other) if p.node == node}
            if mine & theirs:
                lines.append(f"same priority {min(mine & theirs)} as {other} on {node}: neither can be evicted "
                             "for the other")
    if lines:
        return [CheckResult(tenant.name, "priority", WARN, "; ".join(lines))]
    values = sorted({_priority(inventory, p) for p in pods})
    return [CheckResult(tenant.name, "priority", PASS, "PriorityClass values " + ", ".join(map(str, values)))]


def driver_version(labels: dict[str, str]) -> str | None:
    if "nvidia.com/cuda.driver-version.full" in labels:
        return labels["nvidia.com/cuda.driver-version.full"]
    parts = [labels.get(f"nvidia.com/cuda.driver.{p}") for p in ("major", "minor", "rev")]
    return ".".join(p for p in parts if p) if parts[0] else None


def check_driver_version(inventory: Inventory, tenant: Tenant, *, pool_label: str = "") -> list[CheckResult]:
    unread = inventory.unread("pods", tenant) or inventory.unread("nodes", tenant)
    if unread:
        return [CheckResult(tenant.name, "driver-version", ERROR, unread)]
    key = pool_label or "nvidia.com/gpu.product"
    pools = {_labels(inventory, p.node).get(key, "") for p in inventory.gpu_pods(tenant.name) if p.node}
    if not pools:
        return [CheckResult(tenant.name, "driver-version", PASS, "no GPU pods")]
    lines, result = [], PASS
    used = {p.node for p in inventory.gpu_pods(tenant.name) if p.node}
    for pool in sorted(pools):
        versions: dict[str, list[str]] = defaultdict(list)
        for name in sorted(set(inventory.nodes) | used):
            labels = _labels(inventory, name)
            if labels.get(key, "") == pool and (pool or name in used):  # no pool label: the tenant's own nodes
                found = driver_version(labels) or inventory.cluster.agent_drivers.get(name)  # label, else agent
                versions[found or "unlabelled"].append(name)
        if len(versions) > 1:
            result = FAIL
            lines.append(f"pool {pool or '(none)'}: " + "; ".join(
                f"{v} on {', '.join(n)}" for v, n in sorted(versions.items())))
        else:
            version = next(iter(versions))
            result = WARN if version == "unlabelled" and result == PASS else result
            lines.append(f"pool {pool or '(none)'}: driver {version}")
    return [CheckResult(tenant.name, "driver-version", result, "; ".join(lines))]
