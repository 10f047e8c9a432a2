"""The migration cooldown: after a VMI migrates (asked for here, or seen ended in its status) its launcher pod waits;
each further migration within the window doubles the wait, up to the cap; one the agent asked for and then sees
end counts once. Through the real Pacer on a test clock."""

from __future__ import annotations

import dataclasses

import pytest

from action_builders import finding, pod
from watchdog.action.decision import decide
from watchdog.action.pacing import Pacer
from watchdog.action.vm_cooldown import MigrationMemory
from watchdog.config.action import ActionPolicy, VmPolicy
from watchdog.model import Attribution, PodIndex, VmiInfo
from watchdog.model import EvictionResult as R

VICTIM = pod("web", ns="team-a", priority=100)
VMI = VmiInfo(namespace="vms", name="vm-a", uid="uid-vm-a", firmware_uuid="", node="node-1",
              eviction_strategy="LiveMigrate", live_migratable=True)
POLICY = ActionPolicy.model_validate({
    "interference": {"for_seconds": 0}, "pod_cooldown_seconds": 0, "tenant_cooldown_seconds": 0,
    "node_evictions_per_minute": 600, "node_eviction_burst": 10,
    "vms": {"migration_cooldown_seconds": 100, "migration_cooldown_max_seconds": 350,
            "migration_repeat_window_seconds": 1000}})


def launcher(name: str) -> object:
    """A launcher pod of VMI: after each migration KubeVirt runs the VM in a new pod of another name."""
    return pod(name, ns="vms", priority=1, labels={"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": VMI.uid})


def cycle(pacer: Pacer, now: float, culprit, vmi: VmiInfo = VMI, *, answer: R | None = R.MIGRATING):
    """One decide + pace; a request let through gets `answer` from the API server (None: only look)."""
    attribution = Attribution(index=PodIndex.of([culprit, VICTIM]), vmis={vmi.uid: vmi})
    findings = [finding(culprit=culprit, victims=(VICTIM,))]
    (d,) = pacer.pace(decide(findings, attribution, policy=pacer.policy, now=now), now=now, findings=findings,
                      attribution=attribution)
    if d.result is None and answer is not None:
        pacer.record(d.request, answer, now=now)
    return d


def test_the_cooldown_doubles_with_each_migration_up_to_the_cap():
    pacer = Pacer(POLICY)
    waits, now = [], 0.0
    for round_ in range(4):
        pod_now = launcher(f"virt-launcher-vm-a-p{round_}")
        assert cycle(pacer, now, pod_now).result is None  # asked: migrating
        blocked_at = now
        while cycle(pacer, now, pod_now, answer=None).result is R.COOLDOWN:
            now += 10.0
        waits.append(now - blocked_at)
    assert waits == [100.0, 200.0, 350.0, 350.0]


def test_the_detail_names_the_vmi_and_the_time_left():
    pacer = Pacer(POLICY)
    cycle(pacer, 0.0, launcher("virt-launcher-vm-a-p0"))
    d = cycle(pacer, 30.0, launcher("virt-launcher-vm-a-p1"))
    assert d.result is R.COOLDOWN and d.detail == "VMI vms/vm-a migrated once; migration cooldown 70s left"


def test_a_migration_seen_ended_in_the_status_starts_the_cooldown_too():
    pacer = Pacer(POLICY)
    moved = dataclasses.replace(VMI, migration_end="2026-12-02T04:01:00Z")
    assert cycle(pacer, 0.0, launcher("virt-launcher-vm-a-p0"), moved).result is R.COOLDOWN
    assert cycle(pacer, 100.0, launcher("virt-launcher-vm-a-p0"), moved).result is None  # the same end, counted once


def test_a_requested_migration_seen_ending_counts_once_and_is_timed_from_its_end():
    memory, policy = MigrationMemory(), VmPolicy(migration_cooldown_seconds=100, migration_cooldown_max_seconds=400)
    key = launcher("virt-launcher-vm-a-p0")
    memory.learn(key)
    memory.requested(key.ref.key, now=0.0, policy=policy)
    memory.observe([dataclasses.replace(VMI, migration_end="t1")], now=60.0, policy=policy)
    assert memory.wait(key.ref.key, now=150.0) == "VMI vms/vm-a migrated once; migration cooldown 10s left"
    assert memory.wait(key.ref.key, now=160.0) is None
    assert memory.wait("team-b/batch", now=0.0) is None  # a pod that runs no VM


def test_dry_run_starts_the_same_cooldown():
    pacer = Pacer(POLICY)
    cycle(pacer, 0.0, launcher("virt-launcher-vm-a-p0"), answer=R.DRY_RUN)
    assert cycle(pacer, 50.0, launcher("virt-launcher-vm-a-p0")).result is R.COOLDOWN


def test_a_refusal_does_not_count_as_a_migration():
    pacer = Pacer(POLICY)
    cycle(pacer, 0.0, launcher("virt-launcher-vm-a-p0"), answer=R.BLOCKED)
    d = cycle(pacer, 40.0, launcher("virt-launcher-vm-a-p0"))  # its own backoff (30 s) is over
    assert d.result is None


@pytest.mark.parametrize("others", [(), (dataclasses.replace(VMI, name="vm-b", uid="uid-vm-b"),)])
def test_a_vm_that_left_and_came_back_counts_two_migrations(others):
    # Asked to leave here, the VM migrates to another node, whose agent sees that migration end (never this one:
    # the VMI leaves this node's list). When a migration brings it back, that is a second migration, not the end
    # of the one asked for here: the cooldown doubles.
    pacer = Pacer(POLICY)
    assert cycle(pacer, 0.0, launcher("virt-launcher-vm-a-p0")).result is None  # asked: migrating
    gone = Attribution(index=PodIndex.of([VICTIM]), vmis={vmi.uid: vmi for vmi in others})
    pacer.pace([], now=30.0, attribution=gone)  # it left this node
    back = dataclasses.replace(VMI, migration_end="2026-12-02T05:00:00Z")
    cycle(pacer, 300.0, launcher("virt-launcher-vm-a-p1"), back, answer=None)
    d = cycle(pacer, 450.0, launcher("virt-launcher-vm-a-p1"), back, answer=None)
    assert d.result is R.COOLDOWN and "2 times in a row" in d.detail
