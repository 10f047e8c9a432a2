"""vGPU tenants whose VMs cannot live-migrate: for them a node drain, or a relief of GPU contention, means a stopped
VM rather than a moved one.

A KubeVirt VM runs in a virt-launcher pod, and an eviction of that pod (a drain, the descheduler, this project's
agent) is judged by virt-api's webhook after the VMI's evictionStrategy (kubevirt/kubevirt
docs/handling-eviction-requests.md; pkg/virt-api/webhooks/validating-webhook/admitters/pod-eviction-admitter.go):
LiveMigrate moves a migratable VM and refuses the eviction of one that is not (the drain then never ends);
LiveMigrateIfPossible moves it when it can and stops it otherwise; None lets the pod go and stops the VM; External
marks the VMI and refuses the eviction but never migrates it (pkg/util/migrations VMIMigratableOnEviction): an
outside controller acts on the mark (cluster-api-provider-kubevirt tears the VM down), so it is warned; unset
falls back to the KubeVirt CR's spec.configuration.evictionStrategy, which the audit does not read, so it is
warned. Whether a VM can migrate is its condition LiveMigratable (KubeVirt's IsMigratable). VMIs with a vGPU
(nvidia.com/GRID_*, nvidia.com/NVIDIA_* devices) are judged; a tenant without one passes. The remedy is a change
to the VirtualMachine (its template's evictionStrategy, or what keeps it from migrating), not an object to add, so
there is no fix object. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from watchdog.isolation.inventory import Inventory, Tenant, meta
from watchdog.isolation.results import ERROR, FAIL, PASS, WARN, CheckResult
from watchdog.model.vms import is_vgpu_resource

CHECK = "vm-migration"
KIND = "virtualmachineinstances"
_SEVERITY = {PASS: 0, WARN: 1, FAIL: 2}


def _vgpus(vmi: dict[str, Any]) -> list[str]:
    devices = ((vmi.get("spec") or {}).get("domain") or {}).get("devices") or {}
    return [str(d.get("deviceName") or "") for key in ("gpus", "hostDevices") for d in devices.get(key) or ()
            if isinstance(d, dict) and is_vgpu_resource(str(d.get("deviceName") or ""))]


def _judge(vmi: dict[str, Any]) -> tuple[str, str]:
    """(result, why) for one vGPU VMI."""
    strategy = (vmi.get("spec") or {}).get("evictionStrategy") or ""
    condition = next((c for c in (vmi.get("status") or {}).get("conditions") or ()
                      if isinstance(c, dict) and c.get("type") == "LiveMigratable"), None)
    migratable = condition is not None and str(condition.get("status")) == "True"
    why_not = f" ({condition.get('reason') or condition.get('message')})" if condition is not None and (
        condition.get("reason") or condition.get("message")) else ""
    if strategy == "None":
        return FAIL, "evictionStrategy None: an eviction stops the VM"
    if condition is not None and not migratable:
        if strategy == "LiveMigrate":
            return FAIL, f"not live-migratable{why_not}: evictions are refused, a drain never ends"
        return FAIL, f"not live-migratable{why_not}: an eviction stops the VM"
    if not strategy:
        return WARN, "no evictionStrategy: the KubeVirt CR's default applies (None unless configured)"
    if strategy not in ("LiveMigrate", "LiveMigrateIfPossible"):
        return WARN, (f"evictionStrategy {strategy}: KubeVirt does not live-migrate it on eviction (External: an "
                      "outside controller acts on the eviction and may tear the VM down)")
    if condition is None:
        return WARN, f"evictionStrategy {strategy}, but KubeVirt has not said whether it can live-migrate"
    return PASS, f"evictionStrategy {strategy}, live-migratable"


def check_vm_migration(inventory: Inventory, tenant: Tenant) -> list[CheckResult]:
    unread = inventory.unread(KIND, tenant)
    if unread:
        return [CheckResult(tenant.name, CHECK, ERROR, unread)]
    results: list[CheckResult] = []
    for namespace in tenant.namespaces:
        judged = [(meta(vmi).get("name", ""), *_judge(vmi)) for vmi in inventory.cluster.of(KIND, namespace)
                  if _vgpus(vmi)]
        if not judged:
            continue
        worst = max((result for _, result, _ in judged), key=_SEVERITY.__getitem__)
        if worst == PASS:
            evidence = f"{namespace}: {len(judged)} vGPU VM(s), all live-migrate on eviction"
        else:
            evidence = f"{namespace}: " + "; ".join(f"{name}: {why}" for name, result, why in judged
                                                   if result != PASS)
            evidence += ". Fix: set spec.evictionStrategy: LiveMigrate on the VirtualMachine and remove what keeps " \
                        "it from migrating"
        results.append(CheckResult(tenant.name, CHECK, worst, evidence))
    return results or [CheckResult(tenant.name, CHECK, PASS, "no KubeVirt VM with a vGPU")]
