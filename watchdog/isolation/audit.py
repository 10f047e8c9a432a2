"""Run every isolation check for every tenant over one read of the cluster.

The CLI (``gpu-watchdog audit``) and the controller's periodic audit both call ``run_audit`` with what
watchdog.kube.cluster_read read; nothing here talks to the cluster, so tests hand it objects directly. A check that
raises on an object shaped in a way nobody foresaw becomes an ``error`` result for that tenant and check, and the
other checks still run: the audit is read by people deciding what to fix, and a traceback tells them nothing.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from watchdog.isolation.checks_network import check_default_deny, check_rdma_sriov
from watchdog.isolation.checks_placement import (RESERVED_LABEL, check_driver_version, check_mig_power,
                                                 check_node_pool, check_priority, check_sharing_mode)
from watchdog.isolation.checks_quota import check_gpu_limit_range, check_gpu_quota, check_storage_quota
from watchdog.isolation.checks_vms import check_vm_migration
from watchdog.isolation.inventory import Inventory, Tenant, build_inventory
from watchdog.isolation.results import CHECKS, ERROR, AuditReport, CheckResult
from watchdog.model.cluster import ClusterObjects


@dataclass(frozen=True, slots=True)
class AuditSettings:
    tenant_label: str = ""  # namespace label naming the tenant; "" = one tenant per namespace
    reserved_label: str = RESERVED_LABEL  # node label naming the only tenant allowed on that node
    pool_label: str = ""  # node label naming the node pool; "" = group by nvidia.com/gpu.product
    include_system: bool = False  # audit kube-system, kube-public, kube-node-lease too


def _checks(settings: AuditSettings) -> dict[str, Callable[[Inventory, Tenant], list[CheckResult]]]:
    return {
        "gpu-quota": check_gpu_quota,
        "gpu-limit-range": check_gpu_limit_range,
        "node-pool": lambda inv, t: check_node_pool(inv, t, reserved_label=settings.reserved_label),
        "sharing-mode": check_sharing_mode,
        "mig-power": check_mig_power,
        "default-deny": check_default_deny,
        "storage-quota": check_storage_quota,
        "rdma-sriov": check_rdma_sriov,
        "priority": check_priority,
        "driver-version": lambda inv, t: check_driver_version(inv, t, pool_label=settings.pool_label),
        "vm-migration": check_vm_migration,
    }


def run_audit(cluster: ClusterObjects, settings: AuditSettings = AuditSettings()) -> AuditReport:
    report = AuditReport()
    for failure in cluster.errors:
        if failure.kind in ("namespaces", "nodes") or not failure.namespace:
            report.errors.append(f"cannot list {failure.kind}: {failure.message}")
    inventory = build_inventory(cluster, tenant_label=settings.tenant_label, include_system=settings.include_system)
    checks = _checks(settings)
    assert list(checks) == list(CHECKS), "every check in CHECKS has a function, in the same order"
    for tenant in inventory.tenants:
        report.namespaces[tenant.name] = tenant.namespaces
        report.gpu_pods[tenant.name] = len(inventory.gpu_pods(tenant.name))
        for problem in sorted({p for pod in inventory.pods.get(tenant.name, []) for p in pod.problems}):
            report.errors.append(problem)
        for name, check in checks.items():
            try:
                report.results.extend(check(inventory, tenant))
            except Exception as error:  # pure code over foreign objects: a surprise is one row, not the whole run
                report.results.append(CheckResult(tenant.name, name, ERROR,
                                                  f"unexpected object shape: {type(error).__name__}: {error}"))
    return report
