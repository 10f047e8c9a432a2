"""One audit result per tenant and check, and the report that carries them with what could not be read.

Results are ordered as the checks are listed in ``CHECKS`` so a table, its JSON and the controller's metric name
the same things in the same order. ``fix`` is a complete object ready for ``kubectl apply`` (in the tenant's
namespace), or None when the remedy is a change to workloads or nodes rather than an object to add.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PASS, WARN, FAIL, INFO, ERROR = "pass", "warn", "fail", "info", "error"
RESULTS = (PASS, WARN, FAIL, INFO, ERROR)
_SEVERITY = {PASS: 0, INFO: 1, WARN: 2, FAIL: 3, ERROR: 4}

# The checks in report order, with what each one asks (README "Isolation audit" explains each).
CHECKS = {
    "gpu-quota": "a ResourceQuota caps every GPU resource the tenant's pods request",
    "gpu-limit-range": "a LimitRange caps GPUs per container",
    "node-pool": "GPU pods are bound to a node pool and stay off nodes reserved for others",
    "sharing-mode": "the GPU sharing mode the tenant gets (MIG, time-slicing, MPS, whole GPUs)",
    "mig-power": "MIG instances next to another tenant's share the board's power, cooling and PCIe",
    "default-deny": "a default-deny NetworkPolicy (ingress, and egress)",
    "storage-quota": "a storage ResourceQuota for every StorageClass the tenant's claims use",
    "rdma-sriov": "SR-IOV / RDMA devices the tenant's pods request, and whether they are shared",
    "priority": "GPU pods have a PriorityClass that differs from their neighbours'",
    "driver-version": "one NVIDIA driver version across each node pool the tenant uses",
    "vm-migration": "vGPU VMs (KubeVirt) live-migrate on eviction instead of stopping",
}


@dataclass(frozen=True, slots=True)
class CheckResult:
    tenant: str
    check: str
    result: str
    evidence: str
    fix: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.check not in CHECKS or self.result not in RESULTS:
            raise ValueError(f"unknown check {self.check!r} or result {self.result!r}")


@dataclass(slots=True)
class AuditReport:
    """Every tenant's results, the tenants' namespaces and GPU pod counts, and errors not tied to one check."""

    results: list[CheckResult] = field(default_factory=list)
    namespaces: dict[str, tuple[str, ...]] = field(default_factory=dict)
    gpu_pods: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def of(self, tenant: str) -> dict[str, CheckResult]:
        """The tenant's results by check (the last namespace's, when a tenant has several; see ``scorecard``)."""
        return {r.check: r for r in self.results if r.tenant == tenant}

    def scorecard(self) -> dict[tuple[str, str], str]:
        """(tenant, check) → the worst result over the tenant's namespaces: error, fail, warn, info, pass."""
        worst: dict[tuple[str, str], str] = {}
        for r in self.results:
            key = (r.tenant, r.check)
            if key not in worst or _SEVERITY[r.result] > _SEVERITY[worst[key]]:
                worst[key] = r.result
        return worst

    @property
    def failed(self) -> bool:
        return bool(self.errors) or any(r.result in (FAIL, ERROR) for r in self.results)
