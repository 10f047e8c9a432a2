"""Tenant quotas: memory, DRAM share, MIG instances per profile, and the never-acted-on MIG memory warning."""

from __future__ import annotations

from detection_builders import GIB, attribution, gpu, mig, pod, proc, sample

from watchdog.config.detection import DetectionPolicy
from watchdog.detection import Detector
from watchdog.model import FindingKind, Severity

TENANT = {"gpu_memory_bytes": 12 * GIB, "dram_share": 0.5, "instances": {"1g.10gb": 2}}


def policy(**quota) -> DetectionPolicy:
    base = {"tenants": {"ml": TENANT}, "for_ticks": 3, "memory_warning_ratio": None}
    return DetectionPolicy.model_validate({"quota": {**base, **quota}})


def quota(findings):
    return [f for f in findings if f.kind is FindingKind.QUOTA]


ML1 = pod("ml", "a", created=100.0)
ML2 = pod("ml", "b", created=200.0)
ML3 = pod("ml", "c", created=300.0)
OTHER = pod("web", "x")


def node(tick, *, a_bytes, b_bytes):
    instances = (
        mig("MIG-1", gi=1, used=a_bytes, processes=(proc(1, mem=a_bytes),)),
        mig("MIG-2", gi=2, used=b_bytes, processes=(proc(2, mem=b_bytes),)),
    )
    return sample(tick, [gpu("GPU-0", instances=instances)])


ATTR = attribution(devices={"MIG-1": [ML1], "MIG-2": [ML2]}, processes={1: ML1, 2: ML2})


def test_memory_breach_must_persist_then_reports_the_excess():
    detector = Detector(policy())
    spikes = [6, 6, 8, 8, 6, 8, 8, 8, 8]  # GiB on B; A holds 5 GiB; the limit is 12 GiB
    history = [quota(detector.step(node(t, a_bytes=5 * GIB, b_bytes=b * GIB), ATTR)) for t, b in enumerate(spikes)]
    assert [bool(h) for h in history] == [False] * 7 + [True, True]
    f = history[-1][0]
    assert f.key == "quota/ml/memory" and f.tenant == "ml" and f.domain == "tenant/ml"
    assert f.needed == 1 * GIB and f.usage == {"ml/a": 5 * GIB, "ml/b": 8 * GIB}
    assert f.culprit.key == "ml/b" and f.first_tick == 5 and f.severity is Severity.CRITICAL
    # Words with their units; the evidence stays in base units (bytes) for machines.
    assert f.message == "tenant ml uses 13.00 GiB of GPU memory, limit 12.00 GiB"
    assert (f.evidence["usage"], f.evidence["limit"]) == (13 * GIB, 12 * GIB)


def test_unreadable_usage_neither_clears_nor_raises():
    detector = Detector(policy())
    for t in range(4):
        detector.step(node(t, a_bytes=5 * GIB, b_bytes=8 * GIB), ATTR)
    blind = (mig("MIG-1", gi=1, used=None, processes=(proc(1),)), mig("MIG-2", gi=2, used=None, processes=(proc(2),)))
    found = quota(detector.step(sample(4, [gpu("GPU-0", instances=blind)]), ATTR))
    assert [f.key for f in found] == ["quota/ml/memory"] and found[0].first_tick == 0


def test_instances_per_profile_names_the_newest_holder():
    detector = Detector(policy())
    instances = tuple(mig(f"MIG-{i}", gi=i) for i in range(1, 5))
    attr = attribution(devices={"MIG-1": [ML1], "MIG-2": [ML2], "MIG-3": [ML3], "MIG-4": [OTHER]})
    for t in range(3):
        found = quota(detector.step(sample(t, [gpu("GPU-0", instances=instances)]), attr))
    [f] = [f for f in found if f.resource == "instances"]
    assert f.needed == 1 and f.culprit.key == "ml/c" and f.evidence["profile"] == "1g.10gb"
    assert f.usage == {"ml/a": 1, "ml/b": 1, "ml/c": 1}
    assert f.message == "tenant ml holds 3 1g.10gb instances, limit 2 instances"


def test_instances_are_not_judged_from_an_unhealthy_attribution():
    detector = Detector(policy())
    instances = tuple(mig(f"MIG-{i}", gi=i) for i in range(1, 4))
    attr = attribution(devices={"MIG-1": [ML1], "MIG-2": [ML2], "MIG-3": [ML3]}, healthy=False)
    for t in range(5):
        assert not quota(detector.step(sample(t, [gpu("GPU-0", instances=instances)]), attr))


def test_dram_share_on_a_timesliced_gpu():
    detector = Detector(policy())
    attr = attribution(devices={"GPU-1": [ML1, OTHER]}, processes={1: ML1, 2: OTHER})
    for t in range(3):
        processes = (proc(1, sm=0.5, memu=0.7, mem=GIB), proc(2, sm=0.3, memu=0.2, mem=GIB))
        found = quota(detector.step(sample(t, [gpu("GPU-1", processes=processes)]), attr))
    [f] = found
    assert f.resource == "dram" and f.key == "quota/ml/dram/GPU-1" and round(f.needed, 3) == 0.2
    assert (f.gpu_uuid, f.mig_uuid) == ("GPU-1", "")  # the one GPU whose DRAM time is over the share
    assert f.message == "tenant ml takes 70% of DRAM time on GPU-1, limit 50%"
    assert f.evidence["limit"] == 0.5  # a ratio, 0-1


def test_a_tenant_memory_breach_names_no_single_device():
    detector = Detector(policy())
    for t in range(8):
        found = quota(detector.step(node(t, a_bytes=5 * GIB, b_bytes=8 * GIB), ATTR))
    [f] = found
    assert f.key == "quota/ml/memory" and (f.gpu_uuid, f.mig_uuid) == ("", "")


def test_a_full_mig_instance_is_a_warning_of_its_own_kind_not_a_quota_breach():
    detector = Detector(policy(memory_warning_ratio=0.9, tenants={}))
    instance = mig("MIG-1", gi=1, used=int(9.5 * GIB), processes=(proc(1, mem=int(9.5 * GIB)),))
    attr = attribution(devices={"MIG-1": [ML1]}, processes={1: ML1})
    for t in range(3):
        found = detector.step(sample(t, [gpu("GPU-0", instances=(instance,))]), attr)
    assert not quota(found)  # no quota is configured, so none can be exceeded
    [f] = found
    assert f.kind is FindingKind.MIG_MEMORY_WARNING and f.key == "mig-memory/MIG-1"
    assert f.severity is Severity.WARNING and f.domain == "mig/MIG-1" and f.culprit.key == "ml/a"
    assert (f.gpu_uuid, f.mig_uuid) == ("GPU-0", "MIG-1")
    assert f.message.endswith(" is 95% full, warning above 90%") and f.evidence["limit"] == 0.9


def test_unreadable_usage_is_reported_unobserved_with_its_last_seen_tick():
    detector = Detector(policy())
    for t in range(4):
        detector.step(node(t, a_bytes=5 * GIB, b_bytes=8 * GIB), ATTR)
    blind = (mig("MIG-1", gi=1, used=None, processes=(proc(1),)), mig("MIG-2", gi=2, used=None, processes=(proc(2),)))
    [f] = quota(detector.step(sample(4, [gpu("GPU-0", instances=blind)]), ATTR))
    assert f.observed is False and f.last_tick == 3
    [f] = quota(detector.step(node(5, a_bytes=5 * GIB, b_bytes=8 * GIB), ATTR))
    assert f.observed is True and f.last_tick == 5 and f.first_tick == 0


def test_a_quota_removed_by_hot_reload_closes_its_breach_at_once():
    """Reviewer t4: the operator deletes the tenant's limit; the open CRITICAL breach must not linger."""
    detector = Detector(policy())
    for t in range(5):
        found = quota(detector.step(node(t, a_bytes=5 * GIB, b_bytes=8 * GIB), ATTR))
    assert [f.key for f in found] == ["quota/ml/memory"]
    detector.set_policy(DetectionPolicy.model_validate({"quota": {"for_ticks": 3, "memory_warning_ratio": None}}))
    assert not quota(detector.step(node(5, a_bytes=5 * GIB, b_bytes=8 * GIB), ATTR))


def test_a_removed_limit_also_forgets_its_pending_run():
    detector = Detector(policy())
    for t in range(2):  # breached, not yet for_ticks
        detector.step(node(t, a_bytes=5 * GIB, b_bytes=8 * GIB), ATTR)
    detector.set_policy(policy(tenants={"ml": {**TENANT, "gpu_memory_bytes": None}}))
    detector.set_policy(policy())  # the limit is back: its run starts over
    history = [quota(detector.step(node(t, a_bytes=5 * GIB, b_bytes=8 * GIB), ATTR)) for t in range(2, 5)]
    assert [bool(h) for h in history] == [False, False, True] and history[-1][0].first_tick == 2


def test_a_missing_gpu_neither_clears_nor_restarts_the_breach():
    """Reviewer t6: one sample without the tenant's GPU must not clear the breach and restart its `for`."""
    detector = Detector(policy())
    for t in range(5):
        detector.step(node(t, a_bytes=5 * GIB, b_bytes=8 * GIB), ATTR)
    [gap] = quota(detector.step(sample(5, []), ATTR))
    assert gap.key == "quota/ml/memory" and gap.observed is False and gap.last_tick == 4
    lost = quota(detector.step(sample(6, [gpu("GPU-0", lost=True)]), ATTR))
    assert [(f.observed, f.first_tick) for f in lost] == [(False, 0)]
    [back] = quota(detector.step(node(7, a_bytes=5 * GIB, b_bytes=8 * GIB), ATTR))
    assert back.observed is True and back.first_tick == 0


def test_a_missing_gpu_does_not_start_a_breach_either():
    detector = Detector(policy())
    spread = attribution(devices={"MIG-1": [ML1], "MIG-9": [ML3]}, processes={1: ML1})
    for t in range(6):  # MIG-9 (ml/c's) is never in the sample: ml's sum is unknown, nothing starts
        assert not quota(detector.step(node(t, a_bytes=13 * GIB, b_bytes=0), spread))


def test_an_unobserved_breach_expires_after_stale_ticks():
    detector = Detector(policy(stale_ticks=4))
    for t in range(5):
        detector.step(node(t, a_bytes=5 * GIB, b_bytes=8 * GIB), ATTR)
    history = [quota(detector.step(sample(t, []), ATTR)) for t in range(5, 10)]
    assert [bool(h) for h in history] == [True, True, True, True, False]
