"""Sharing domains derived from a sample + attribution, the tick contract, and the change log helper."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import pytest
from detection_builders import attribution, gpu, mig, pod, proc, sample

from watchdog.detection import Detector, DomainKind, changes, devices_of, domains_of
from watchdog.model import Finding, FindingKind, PodRef, Severity

A, B, C = pod("t1", "a"), pod("t2", "b"), pod("t3", "c")


def kinds(domains):
    return {(d.kind, d.key): sorted(p.key for p in d.pods) for d in domains}


def test_mig_gpu_is_one_power_domain_and_a_split_gi_shares_dram():
    instances = (
        mig("MIG-1", gi=1, ci=0, profile="1c.4g.40gb", sm=0.5),
        mig("MIG-2", gi=1, ci=1, profile="3c.4g.40gb", sm=0.2),
        mig("MIG-3", gi=2, profile="3g.40gb", sm=None),
    )
    s = sample(1, [gpu("GPU-0", instances=instances)])
    domains = domains_of(devices_of(s, attribution(devices={"MIG-1": [A], "MIG-2": [B], "MIG-3": [C]})))
    assert kinds(domains) == {
        (DomainKind.POWER, "gpu/GPU-0/power"): ["t1/a", "t2/b", "t3/c"],
        (DomainKind.GPU_INSTANCE, "gi/GPU-0/1"): ["t1/a", "t2/b"],
    }
    power = domains[0]
    assert power.activity == {"t1/a": 0.5, "t2/b": 0.2, "t3/c": None}  # unknown stays None, never 0
    assert power.share["t3/c"] == pytest.approx(3 / 7)


def test_timesliced_gpu_shares_sm_between_its_pods():
    s = sample(1, [gpu("GPU-1", processes=(proc(1, sm=0.4), proc(2, sm=0.5), proc(3, sm=0.1)), gpu_util=1.0)])
    attr = attribution(devices={"GPU-1": [A, B]}, processes={1: A, 2: B})
    domains = domains_of(devices_of(s, attr))
    assert kinds(domains) == {
        (DomainKind.POWER, "gpu/GPU-1/power"): ["t1/a", "t2/b"],
        (DomainKind.TIMESLICE, "timeslice/GPU-1"): ["t1/a", "t2/b"],
    }
    # Busy is the GPU's own account (utilization.gpu), not the attributed shares' sum (0.9).
    assert domains[1].activity == {"t1/a": 0.4, "t2/b": 0.5} and domains[1].busy == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("gpu_util", "ctxsw_active", "busy"),
    [
        (1.0, None, 1.0),  # three contexts' shares sum to 0.88, utilization.gpu says no idle time: busy
        (None, 0.1, 0.98),  # no utilization reading: the shares plus the time GPM says the engine spent switching
        (None, None, 0.88),  # neither: the shares' sum is all there is
        (0.5, None, 0.88),  # a utilization reading below the shares' sum never hides their use
    ],
)
def test_a_timesliced_gpu_is_as_busy_as_it_says_not_as_its_shares_sum(gpu_util, ctxsw_active, busy):
    processes = (proc(1, sm=0.4), proc(2, sm=0.3), proc(3, sm=0.18))
    s = sample(1, [replace(gpu("GPU-1", processes=processes, gpu_util=gpu_util), ctxsw_active=ctxsw_active)])
    attr = attribution(devices={"GPU-1": [A, B, C]}, processes={1: A, 2: B, 3: C})
    timeslice = next(d for d in domains_of(devices_of(s, attr)) if d.kind is DomainKind.TIMESLICE)
    assert timeslice.busy == pytest.approx(busy)


def test_exclusive_and_lost_gpus_share_nothing_but_an_intruder_joins():
    exclusive = gpu("GPU-2", processes=(proc(1, sm=0.9),))
    lost = gpu("GPU-3", lost=True)
    alone = attribution(devices={"GPU-2": [A]}, processes={1: A})
    assert domains_of(devices_of(sample(1, [exclusive, lost]), alone)) == []
    intruded = gpu("GPU-2", processes=(proc(1, sm=0.5), proc(2, sm=0.4)))
    attr = attribution(devices={"GPU-2": [A]}, processes={1: A, 2: B})
    [device] = devices_of(sample(1, [intruded]), attr)
    assert [r.key for r in device.assigned] == ["t1/a"] and [r.key for r in device.pods] == ["t1/a", "t2/b"]


def test_device_sums_are_the_attributions_usage_per_pod():
    """Detection folds the per-(pod, container) sums attribution made; it never sums processes itself."""
    a_main, a_side = PodRef("t1", "a", A.uid, "main"), PodRef("t1", "a", A.uid, "side")
    s = sample(1, [gpu("GPU-1", processes=(proc(1, mem=2, sm=0.25, memu=0.5), proc(2, mem=3, sm=0.5),
                                           proc(3, mem=5, sm=0.125), proc(4, mem=7, sm=0.0625)))])
    attr = dataclasses.replace(attribution(devices={"GPU-1": [A, B]}),
                               processes={1: a_main, 2: B.ref, 3: a_side, 4: a_main})
    usage = attr.usage(s)
    [device] = devices_of(s, attr)
    assert attr.usage(s) is usage  # summed once: detection read the sums already made
    assert [u.ref.container if u.ref else None for u in usage["GPU-1"]] == ["main", None, "side"]
    assert device.pod_memory == {"t1/a": 2 + 7 + 5, "t2/b": 3}
    assert device.pod_sm == {"t1/a": pytest.approx(0.25 + 0.0625 + 0.125), "t2/b": 0.5}
    assert device.pod_dram == {"t1/a": 0.5} and device.unattributed_sm is None
    assert [ref.key for ref in device.pods] == ["t1/a", "t2/b"]


def test_an_exclusive_device_without_per_process_numbers_gives_its_pod_the_device_totals():
    """Detection's own rule for a gap, kept out of the shared sums: the published series stay measured only."""
    s = sample(1, [gpu("GPU-1", processes=(proc(1),), used=9, gpu_util=0.75)])
    attr = attribution(devices={"GPU-1": [A]}, processes={1: A})
    [device] = devices_of(s, attr)
    assert device.pod_memory == {"t1/a": 9} and device.pod_sm == {"t1/a": 0.75}
    [user] = attr.usage(s)["GPU-1"]
    assert (user.memory_bytes, user.sm_util) == (None, None)


def test_ticks_must_increase_and_inputs_are_checked():
    detector = Detector()
    detector.step(sample(5, []), attribution(devices={}))
    with pytest.raises(ValueError, match="tick 5 is not after"):
        detector.step(sample(5, []), attribution(devices={}))
    with pytest.raises(TypeError):
        detector.step({"tick": 6}, attribution(devices={}))  # type: ignore[arg-type]


def test_findings_name_tenants_by_the_attributions_index():
    """Detection has no tenant rule of its own: the tick's pod index (its label, else the namespace) decides."""
    owner, sneak = pod("t1", "owner"), pod("ns-1", "sneak", labels={"tenant": "acme"})
    node = [gpu("GPU-0", instances=(mig("MIG-a", gi=1, processes=(proc(10, mem=1), proc(20, mem=1))),
                                    mig("MIG-b", gi=2)))]
    tenants = {}
    for label in ("tenant", None):
        detector = Detector()
        attr = attribution(devices={"MIG-a": [owner], "MIG-b": [sneak]}, processes={10: owner, 20: sneak},
                           tenant_label=label)
        [finding] = [f for t in range(6) for f in detector.step(sample(t, node), attr) if t == 5]
        tenants[label] = finding.tenant
    assert tenants == {"tenant": "acme", None: "ns-1"}


def test_changes_reports_new_updated_and_resolved_once():
    base = Finding(FindingKind.QUOTA, "k1", "tenant/t", "memory", Severity.CRITICAL, 1, 1, 1.0)
    other = Finding(FindingKind.QUOTA, "k2", "tenant/t", "memory", Severity.CRITICAL, 1, 1, 1.0)
    assert changes((), (base,)) == (("new", base),)
    moved = dataclasses.replace(base, last_tick=2, evidence={"usage": 3}, needed=5.0)
    assert changes((base,), (moved,)) == ()  # numbers move every tick: not worth a log line
    recast = dataclasses.replace(moved, culprit=PodRef("t", "p"))
    assert changes((moved,), (recast, other)) == (("updated", recast), ("new", other))
    assert changes((recast, other), (other,)) == (("resolved", recast),)
