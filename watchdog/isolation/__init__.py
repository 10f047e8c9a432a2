"""Tenant isolation audit: does the cluster's configuration keep the tenants of a shared GPU pool apart?

The agent finds interference while it happens; this package checks the configuration that should prevent it —
quotas, LimitRanges, node pools, the GPU sharing mode, NetworkPolicies, storage quotas, RDMA/SR-IOV devices,
priorities and driver versions — per tenant, with evidence and the object that would fix each failure. Pure
functions over what watchdog.kube.cluster_read read (watchdog.model.cluster); ``gpu-watchdog audit`` and the
controller's periodic audit are the callers.
"""

from watchdog.isolation.audit import AuditSettings, run_audit
from watchdog.isolation.render import RENDERERS, fixes_yaml, report_dict
from watchdog.isolation.results import CHECKS, AuditReport, CheckResult

__all__ = ["AuditReport", "AuditSettings", "CHECKS", "CheckResult", "RENDERERS", "fixes_yaml", "report_dict",
           "run_audit"]
