"""The vm-migration check: vGPU tenants whose KubeVirt VMs would stop (or block a drain) rather than live-migrate."""

from __future__ import annotations

from watchdog.isolation import AuditSettings, run_audit
from watchdog.model.cluster import ClusterObjects, ReadError

from tests.isolation.test_isolation_checks import ns


def vmi(namespace: str, name: str, *, strategy: str | None = "LiveMigrate", migratable: str | None = "True",
        device: str = "nvidia.com/GRID_A100_4C", reason: str = "") -> dict:
    spec: dict = {"domain": {"devices": {"gpus": [{"name": "g", "deviceName": device}]}}}
    if strategy:
        spec["evictionStrategy"] = strategy
    conditions = [] if migratable is None else [{"type": "LiveMigratable", "status": migratable, "reason": reason}]
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec,
            "status": {"phase": "Running", "conditions": conditions}}


def check(*vmis: dict, errors=()) -> dict[str, tuple[str, str]]:
    namespaces = sorted({v["metadata"]["namespace"] for v in vmis} | {"plain"})
    report = run_audit(ClusterObjects(objects={"namespaces": [ns(n) for n in namespaces], "nodes": [],
                                               "virtualmachineinstances": list(vmis)}, errors=list(errors)),
                       AuditSettings())
    return {r.tenant: (r.result, r.evidence) for r in report.results if r.check == "vm-migration"}


def test_live_migrating_vgpu_vms_pass_and_tenants_without_vms_too():
    results = check(vmi("vms", "a"), vmi("vms", "b"))
    assert results["vms"] == ("pass", "vms: 2 vGPU VM(s), all live-migrate on eviction")
    assert results["plain"] == ("pass", "no KubeVirt VM with a vGPU")


def test_strategy_none_and_unmigratable_vms_fail_with_the_reason():
    results = check(vmi("vms", "a"), vmi("vms", "stops", strategy="None"),
                    vmi("vms", "stuck", migratable="False", reason="HostDeviceNotLiveMigratable"))
    result, evidence = results["vms"]
    assert result == "fail"
    assert "stops: evictionStrategy None: an eviction stops the VM" in evidence
    assert "stuck: not live-migratable (HostDeviceNotLiveMigratable): evictions are refused" in evidence
    assert "a: " not in evidence and "Fix: set spec.evictionStrategy: LiveMigrate" in evidence


def test_unset_strategy_or_unknown_migratability_is_warned():
    assert check(vmi("vms", "a", strategy=None))["vms"][0] == "warn"
    assert check(vmi("vms", "a", migratable=None))["vms"][0] == "warn"
    assert check(vmi("vms", "a", strategy="LiveMigrateIfPossible", migratable="False"))["vms"][0] == "fail"


def test_vms_without_a_vgpu_are_not_judged():
    results = check(vmi("vms", "pt", device="nvidia.com/GA100_A100_PCIE_80GB", strategy="None"))
    assert results["vms"] == ("pass", "no KubeVirt VM with a vGPU")


def test_an_unreadable_list_is_an_error_for_that_tenant():
    results = check(vmi("vms", "a"), errors=[ReadError("virtualmachineinstances", "vms", "forbidden")])
    assert results["vms"][0] == "error" and results["plain"][0] == "pass"


def test_an_external_strategy_is_not_taken_for_live_migration():
    # External: KubeVirt marks the VMI and refuses the eviction but never migrates it (pkg/util/migrations
    # VMIMigratableOnEviction); an outside controller acts on the mark (cluster-api-provider-kubevirt tears the VM
    # down). Not "all live-migrate on eviction".
    result, evidence = check(vmi("vms", "capk-node", strategy="External"))["vms"]
    assert result == "warn" and "capk-node: evictionStrategy External" in evidence
