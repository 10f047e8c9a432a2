"""End to end over real HTTP: the action stage asks for a virt-launcher pod's eviction and the fake API server
answers as KubeVirt does. A LiveMigrate VM is live-migrated (`migrating`: counted, audited, an Event, a
VirtualMachineInstanceMigration); one that cannot migrate is `blocked` with KubeVirt's reason; one whose eviction
would stop it is not sent for unless the policy allows it."""

from __future__ import annotations

import io
import json

import pytest

from action_builders import finding, warmed_stage
from watchdog.action import AuditLog
from watchdog.attribution.vgpus import vmis_by_uid
from watchdog.config.action import ActionPolicy
from watchdog.kube.eviction import KubeEvictions
from watchdog.kube.pods import pod_info
from watchdog.kube.vmis import vmi_info
from watchdog.model import Attribution, PodIndex
from watchdog.model import EvictionResult as R
from watchdog.testbed.cluster.apiserver_store import VMI_MIGRATIONS, VMIS

NOW = 1_800_000_000.0


@pytest.fixture
def kube(server, api) -> KubeEvictions:
    server.add_node("node-1")
    server.add_node("node-2")
    server.add_pod(namespace="team-a", name="web", priority=100)
    return KubeEvictions(api)


def add_vm(server, *, strategy: str = "LiveMigrate", migratable: bool = True) -> str:
    vmi = server.store.create(VMIS, {
        "metadata": {"name": "vm-a", "namespace": "vms", "labels": {"kubevirt.io/nodeName": "node-1"}},
        "spec": {"evictionStrategy": strategy,
                 "domain": {"devices": {"gpus": [{"name": "g", "deviceName": "nvidia.com/GRID_A100_4C"}]}}},
        "status": {"phase": "Running", "nodeName": "node-1",
                   "conditions": [{"type": "LiveMigratable", "status": "True" if migratable else "False"}]}})
    pod = server.add_pod(namespace="vms", name="virt-launcher-vm-a-abcde", node="node-1", priority=1, owner_kind=None,
                         labels={"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": vmi["metadata"]["uid"]},
                         annotations={"kubevirt.io/domain": "vm-a"})
    return pod["metadata"]["name"]


def world(server, launcher: str):
    """The tick as the agent sees it: the pods from the API, the VMIs as kube/vmis.py reads them."""
    culprit, victim = pod_info(server.get_pod("vms", launcher)), pod_info(server.get_pod("team-a", "web"))
    attribution = Attribution(index=PodIndex.of([culprit, victim]),
                              vmis=vmis_by_uid(vmi_info(v) for v in server.store.list(VMIS)))
    return [finding(culprit=culprit, victims=(victim,))], attribution


def stage(kube, mode: str = "enforce", **policy):
    audit = io.StringIO()
    p = ActionPolicy.model_validate({"mode": mode, "interference": {"for_seconds": 0}, **policy})
    s, clock = warmed_stage(p, now=NOW, api=kube, audit=AuditLog(stream=audit), node="node-1", kill_switch=None)
    return s, clock, audit


def events(server, reason: str) -> list[dict]:
    return [e for e in server.objects("events", "vms") if e.get("reason") == reason]


async def test_enforce_live_migrates_a_live_migrate_vm(server, kube):
    launcher = add_vm(server)
    s, clock, audit = stage(kube)
    outcomes = (await s.run_cycle(*world(server, launcher))).outcomes
    assert [(o.result, o.http_status) for o in outcomes] == [(R.MIGRATING, 429)]
    (vmim,) = server.store.list(VMI_MIGRATIONS, "vms")
    assert vmim["spec"]["vmiName"] == "vm-a"
    assert s.counts == {("migrating", "interference", "vms"): 1}  # gpu_watchdog_evictions_total{result="migrating"}
    line = json.loads(audit.getvalue())
    assert line["result"] == "migrating" and line["pod"]["name"] == launcher and "vms/vm-a" in line["detail"]
    (event,) = events(server, "GpuWatchdogMigrationRequested")
    assert event["type"] == "Normal" and "live-migrate" in event["message"] and "vms/vm-a" in event["message"]
    assert server.get_pod("vms", launcher)["status"]["phase"] == "Running"  # not evicted: moving
    # Next cycle: the VMI shows the evacuation; nobody is sent for while the VM moves.
    clock.advance(60.0)
    server.requests.clear()
    report = await s.run_cycle(*world(server, launcher))
    assert [r.result for r in report.counted] == [R.VM_MIGRATING] and not server.requests
    # Once it has moved, the migration cooldown holds the VMI (its new launcher pod included).
    server.evacuations.finish()
    (target,) = [p["metadata"]["name"] for p in server.objects("pods", "vms") if p["metadata"]["name"] != launcher]
    clock.advance(60.0)
    report = await s.run_cycle(*world(server, target))
    assert [r.result for r in report.counted] == [R.COOLDOWN] and "VMI vms/vm-a migrated" in report.counted[0].detail


async def test_a_live_migrate_vm_that_cannot_migrate_is_blocked_with_kubevirts_reason(server, kube):
    launcher = add_vm(server, migratable=False)
    s, _, audit = stage(kube)
    outcomes = (await s.run_cycle(*world(server, launcher))).outcomes
    assert [o.result for o in outcomes] == [R.BLOCKED]
    reason = "VMI vm-a is configured with an eviction strategy but is not live-migratable"
    assert outcomes[0].detail == f"refused by KubeVirt: {reason}"
    assert s.counts == {("blocked", "interference", "vms"): 1}
    assert json.loads(audit.getvalue())["detail"].endswith(reason)
    (event,) = events(server, "GpuWatchdogEvictionBlocked")
    assert reason in event["message"]
    assert not server.store.list(VMI_MIGRATIONS)


async def test_a_vm_an_eviction_would_stop_is_not_sent_for(server, kube):
    launcher = add_vm(server, strategy="None")
    s, _, audit = stage(kube)
    server.requests.clear()
    report = await s.run_cycle(*world(server, launcher))
    assert [r.result for r in report.counted] == [R.VM_NOT_MIGRATABLE]
    assert not [r for r in server.requests if r[1].endswith("/eviction")]
    assert json.loads(audit.getvalue())["result"] == "vm_not_migratable"


async def test_the_policy_may_allow_stopping_it(server, kube):
    launcher = add_vm(server, strategy="None")
    s, _, _ = stage(kube, vms={"evict_without_migration": True})
    outcomes = (await s.run_cycle(*world(server, launcher))).outcomes
    assert [o.result for o in outcomes] == [R.EVICTED]
    gone = server.get_pod("vms", launcher)
    assert gone is None or gone["metadata"].get("deletionTimestamp")


async def test_dry_run_says_it_would_migrate_and_moves_nothing(server, kube):
    launcher = add_vm(server)
    s, _, _ = stage(kube, mode="dry-run")
    outcomes = (await s.run_cycle(*world(server, launcher))).outcomes
    assert [o.result for o in outcomes] == [R.DRY_RUN] and "would live-migrate VMI vms/vm-a" in outcomes[0].detail
    assert not server.store.list(VMI_MIGRATIONS)
    assert "evacuationNodeName" not in server.store.get(VMIS, "vms", "vm-a")["status"]


def _set_vmi(server, **changes) -> None:
    import copy

    vmi = copy.deepcopy(server.store.get(VMIS, "vms", "vm-a"))
    if "migratable" in changes:
        vmi["status"]["conditions"] = [{"type": "LiveMigratable",
                                        "status": "True" if changes["migratable"] else "False"}]
    if "strategy" in changes:
        vmi["spec"]["evictionStrategy"] = changes["strategy"]
    server.store.update(VMIS, vmi)


def _evictions(server) -> list:
    return [r for r in server.requests if r[1].endswith("/eviction")]


async def test_the_vmi_is_read_again_before_the_send_and_a_vm_that_would_now_stop_is_not_sent_for(server, kube):
    # Decided on a list where the VM could migrate; by the send, LiveMigratable is False, and under
    # LiveMigrateIfPossible KubeVirt's webhook would let the eviction through: the VM would be stopped.
    launcher = add_vm(server, strategy="LiveMigrateIfPossible")
    decided_on = world(server, launcher)
    _set_vmi(server, migratable=False)
    s, _, audit = stage(kube)
    server.requests.clear()
    report = await s.run_cycle(*decided_on)
    assert [r.result for r in report.counted] == [R.VM_NOT_MIGRATABLE], report.counted
    assert report.counted[0].detail.startswith("re-checked before sending")
    assert not _evictions(server)
    assert server.get_pod("vms", launcher)["status"]["phase"] == "Running"
    assert any(r[1].endswith("/virtualmachineinstances/vm-a") for r in server.requests)


async def test_a_vmi_gone_by_the_send_sends_nothing(server, kube):
    launcher = add_vm(server)
    decided_on = world(server, launcher)
    server.store.remove(VMIS, "vms", "vm-a")
    s, _, _ = stage(kube)
    server.requests.clear()
    report = await s.run_cycle(*decided_on)
    assert [r.result for r in report.counted] == [R.UNSAFE] and not _evictions(server)


async def test_a_vm_that_can_still_migrate_is_sent_for_after_the_reread(server, kube):
    launcher = add_vm(server)
    decided_on = world(server, launcher)
    _set_vmi(server, strategy="LiveMigrate")  # unchanged in substance: still migrates
    s, _, _ = stage(kube)
    outcomes = (await s.run_cycle(*decided_on)).outcomes
    assert [o.result for o in outcomes] == [R.MIGRATING]
