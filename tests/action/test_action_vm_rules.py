"""Which virt-launcher pods may be candidates: only those whose VM KubeVirt will live-migrate, unless the policy
says otherwise; each refusal has its own result and says why. Through the real decision rules (decide)."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from action_builders import finding, pod
from watchdog.action.decision import decide
from watchdog.action.vm_rules import will_migrate
from watchdog.config.action import ActionPolicy
from watchdog.model import Attribution, FindingKind, PodIndex, VmiInfo
from watchdog.model import EvictionResult as R

VICTIM = pod("web", ns="team-a", priority=100)


def launcher(vm: str = "vm-a") -> tuple:
    info = VmiInfo(namespace="vms", name=vm, uid=f"uid-{vm}", firmware_uuid="", node="node-1", phase="Running",
                   eviction_strategy="LiveMigrate", live_migratable=True, vgpu_resources=("nvidia.com/GRID_A100_4C",))
    return pod(f"virt-launcher-{vm}-x2b4d", ns="vms", priority=1,
               labels={"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": info.uid}), info


def decision(culprit, vmis, **policy):
    attribution = Attribution(index=PodIndex.of([culprit, VICTIM]), vmis={v.uid: v for v in vmis})
    (d,) = decide([finding(culprit=culprit, victims=(VICTIM,))], attribution,
                  policy=ActionPolicy.model_validate(policy), now=0.0)
    return d


def test_a_vm_that_will_migrate_is_a_candidate():
    culprit, vmi = launcher()
    d = decision(culprit, [vmi])
    assert d.result is None and d.request.pod.name == culprit.name


@pytest.mark.parametrize("strategy,migratable", [("None", True), ("", True), ("LiveMigrateIfPossible", False)])
def test_a_vm_an_eviction_would_stop_is_not_a_candidate_unless_allowed(strategy, migratable):
    culprit, vmi = launcher()
    vmi = dataclasses.replace(vmi, eviction_strategy=strategy, live_migratable=migratable)
    d = decision(culprit, [vmi])
    assert d.result is R.VM_NOT_MIGRATABLE and "would stop the VM" in d.detail and "vms/vm-a" in d.detail
    assert decision(culprit, [vmi], vms={"evict_without_migration": True}).result is None


def test_a_cluster_default_strategy_is_named_as_such():
    culprit, vmi = launcher()
    vmi = dataclasses.replace(vmi, eviction_strategy="None", strategy_from_cluster=True)
    assert "(the cluster default)" in decision(culprit, [vmi]).detail


def test_live_migrate_but_not_migratable_is_left_to_kubevirt():
    # KubeVirt refuses that eviction itself; its answer (blocked, with the reason) is what an operator should see.
    culprit, vmi = launcher()
    assert decision(culprit, [dataclasses.replace(vmi, live_migratable=False)]).result is None


def test_passthrough_is_reported_never_evicted_by_default():
    culprit, vmi = launcher()
    vmi = dataclasses.replace(vmi, passthrough=("nvidia.com/GH100_H200_SXM_141GB",), vgpu_resources=(),
                              eviction_strategy="None")
    d = decision(culprit, [vmi])
    assert d.result is R.VM_PASSTHROUGH and "GH100_H200" in d.detail
    assert decision(culprit, [vmi], vms={"passthrough": "evict", "evict_without_migration": True}).result is None


def test_a_migrating_vm_is_leaving():
    culprit, vmi = launcher()
    d = decision(culprit, [dataclasses.replace(vmi, migrating=True, evacuation_node="node-1")])
    assert d.result is R.VM_MIGRATING and "evacuating from node-1" in d.detail


def test_a_launcher_whose_vmi_is_not_listed_is_never_acted_on():
    culprit, _ = launcher()
    d = decision(culprit, [])
    assert d.result is R.UNSAFE and "never act blind" in d.detail


def test_pods_that_run_no_vm_are_not_affected():
    plain = pod("batch", ns="team-b", priority=1)
    assert decision(plain, []).result is None


def test_memory_pressure_waits_for_a_migrating_vm_instead_of_evicting_another():
    culprit, vmi = launcher()
    other = pod("batch", ns="team-b", priority=2)  # ranked after the launcher: it would be the next one tried
    attribution = Attribution(index=PodIndex.of([culprit, other]),
                              vmis={vmi.uid: dataclasses.replace(vmi, migrating=True)})
    f = finding(FindingKind.MEMORY_PRESSURE, usage={f"vms/{culprit.name}": 8.0, "team-b/batch": 4.0}, needed=2.0)
    (d,) = decide([f], attribution, policy=ActionPolicy(), now=0.0)
    assert d.result is R.VM_MIGRATING and d.pod == culprit.name


@pytest.mark.parametrize("strategy,migratable,expected", [
    ("LiveMigrate", False, True), ("External", True, False), ("LiveMigrateIfPossible", True, True),
    ("LiveMigrateIfPossible", False, False), ("None", True, False), ("", True, False)])
def test_will_migrate(strategy, migratable, expected):
    _, vmi = launcher()
    assert will_migrate(dataclasses.replace(vmi, eviction_strategy=strategy, live_migratable=migratable)) is expected


@pytest.mark.parametrize("vms,field", [
    ({"passthrough": "stop"}, ("vms", "passthrough")),
    ({"migration_cooldown_seconds": -1}, ("vms", "migration_cooldown_seconds")),
    ({"migration_cooldown_seconds": 600, "migration_cooldown_max_seconds": 60}, ("vms",)),
    ({"evict_without_migraton": True}, ("vms", "evict_without_migraton")),
])
def test_the_vms_policy_is_validated_with_the_field_named(vms, field):
    with pytest.raises(ValidationError) as caught:
        ActionPolicy.model_validate({"vms": vms})
    assert caught.value.errors()[0]["loc"] == field


def test_an_external_strategy_vm_is_not_taken_for_a_migrating_one():
    # External: KubeVirt marks the VMI and refuses the eviction, but its evacuation controller never migrates it
    # (pkg/util/migrations VMIMigratableOnEviction is false for External); an outside controller acts on the mark,
    # cluster-api-provider-kubevirt by tearing the VM down (docs/handling-eviction-requests.md). So it is a VM an
    # eviction may stop: not a candidate unless the policy allows stopping VMs.
    culprit, vmi = launcher()
    vmi = dataclasses.replace(vmi, eviction_strategy="External", live_migratable=True)
    d = decision(culprit, [vmi])
    assert d.result is R.VM_NOT_MIGRATABLE and "External" in d.detail
    assert decision(culprit, [vmi], vms={"evict_without_migration": True}).result is None
