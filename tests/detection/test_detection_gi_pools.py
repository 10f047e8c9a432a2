"""A GPU instance split into compute instances is one memory pool: pressure, the GI-fill warning and tenant quota
sums are judged on the pool, once, never once per CI handle (each of which reports the GI's memory)."""

from __future__ import annotations

from detection_builders import GIB, attribution, gpu, mig, pod, proc, sample

from watchdog.config.detection import DetectionPolicy
from watchdog.detection import Detector
from watchdog.detection.domains import devices_of
from watchdog.detection.pools import gi_profile, memory_pools
from watchdog.model import FindingKind, MigSample, ProcessSample

MIB = 1 << 20
POLICY = DetectionPolicy.model_validate({
    "memory_pressure": {"min_free_bytes": GIB, "min_free_ratio": 0, "band_bytes": 512 * MIB, "band_ratio": 0},
    "quota": {"tenants": {"team-a": {"gpu_memory_bytes": 6 * GIB}, "team-b": {"gpu_memory_bytes": 8 * GIB}}},
})


def split_gi(tick, *, a_bytes, b_bytes, per_process=True, total=10 * GIB):
    """GI 1 of GPU-0 as two CIs (MIG-c0: team-a, MIG-c1: team-b); both handles report the GI's memory."""
    used = a_bytes + b_bytes

    def ci(uuid, ci_id, pid, own):
        return mig(uuid, gi=1, ci=ci_id, profile="1c.2g.20gb", total=total, used=used,
                   processes=(proc(pid, mem=own if per_process else None),))

    return sample(tick, [gpu("GPU-0", instances=(ci("MIG-c0", 0, 100, a_bytes), ci("MIG-c1", 1, 200, b_bytes)))])


def pods_on_split_gi():
    a = pod("team-a", "infer", priority=100, request=4 * GIB)
    b = pod("team-b", "train", priority=0, request=2 * GIB)
    return a, b, attribution(devices={"MIG-c0": [a], "MIG-c1": [b]}, processes={100: a, 200: b})


def run(detector, attr, samples):
    return [detector.step(s, attr) for s in samples]


def test_pressure_in_a_split_gi_is_judged_once_on_the_pool_with_the_grower_as_culprit():
    a, b, attr = pods_on_split_gi()
    detector = Detector(POLICY)
    ticks = run(detector, attr, [split_gi(t, a_bytes=4 * GIB, b_bytes=(2 + min(t, 4)) * GIB) for t in range(10)])
    found = [f for f in ticks[-1] if f.kind is FindingKind.MEMORY_PRESSURE]
    assert len(found) == 1, "one finding for the GI, not one per CI (and not none because each CI has one pod)"
    [finding] = found
    assert finding.key == "memory_pressure/gi/GPU-0/1" and finding.domain == "gi/GPU-0/1"
    assert finding.culprit == b.ref and finding.victims == (a.ref,)
    assert finding.evidence["total_bytes"] == 10 * GIB and finding.evidence["free_bytes"] == 0
    assert finding.evidence["compute_instances"] == "MIG-c0,MIG-c1"
    assert finding.usage == {a.ref.key: 4 * GIB, b.ref.key: 6 * GIB}


def test_a_full_split_gi_warns_once_and_no_tenant_is_charged_the_gi_memory():
    policy = DetectionPolicy.model_validate({**POLICY.model_dump(), "quota": {
        **POLICY.model_dump()["quota"], "memory_warning_ratio": 0.9, "for_ticks": 1}})
    a, b, attr = pods_on_split_gi()
    detector = Detector(policy)
    # No per-process numbers: each CI handle reports only the GI's 9.5 GiB, which belongs to neither pod alone.
    findings = run(detector, attr, [split_gi(t, a_bytes=4 * GIB, b_bytes=5 * GIB + 512 * MIB, per_process=False)
                                    for t in range(5)])[-1]
    warnings = [f for f in findings if f.kind is FindingKind.MIG_MEMORY_WARNING]
    assert [f.key for f in warnings] == ["mig-memory/gi/GPU-0/1"]
    assert warnings[0].evidence["profile"] == "2g.20gb" and warnings[0].mig_uuid == ""
    assert not [f for f in findings if f.kind is FindingKind.QUOTA], "9.5 GiB once per CI would breach both quotas"


def test_pool_counts_a_pid_listed_on_two_ci_handles_once():
    a, b, attr = pods_on_split_gi()
    doubled = mig("MIG-c1", gi=1, ci=1, profile="1c.2g.20gb", total=10 * GIB, used=7 * GIB,
                  processes=(proc(100, mem=3 * GIB), proc(200, mem=4 * GIB)))
    first = mig("MIG-c0", gi=1, ci=0, profile="1c.2g.20gb", total=10 * GIB, used=7 * GIB,
                processes=(proc(100, mem=3 * GIB),))
    devices = devices_of(sample(0, [gpu("GPU-0", instances=(first, doubled))]), attr)
    [pool] = memory_pools(devices, attr)
    assert pool.pod_memory == {a.ref.key: 3 * GIB, b.ref.key: 4 * GIB}
    assert pool.memory_used == 7 * GIB and pool.compute_instances == ("MIG-c0", "MIG-c1")


def test_gis_with_one_ci_stay_devices_of_their_own():
    a, b, _ = pods_on_split_gi()
    attr = attribution(devices={"MIG-x": [a], "MIG-y": [b]}, processes={100: a, 200: b})
    instances = (mig("MIG-x", gi=1, processes=(proc(100, mem=GIB),)), mig("MIG-y", gi=2, processes=(proc(200, mem=GIB),)))
    devices = devices_of(sample(0, [gpu("GPU-0", instances=instances)]), attr)
    assert memory_pools(devices, attr) == devices
    assert gi_profile("3c.7g.80gb") == "7g.80gb" and gi_profile("1g.10gb+me") == "1g.10gb+me"


def test_a_process_listed_on_both_ci_handles_counts_on_its_own_ci_only():
    a, b, attr = pods_on_split_gi()
    listed = (ProcessSample(100, 3 * GIB, 1, 0), ProcessSample(200, 4 * GIB, 1, 1))
    instances = tuple(MigSample(uuid, 0, 1, ci, "1c.2g.20gb", 10 * GIB, 7 * GIB, 0, processes=listed)
                      for uuid, ci in (("MIG-c0", 0), ("MIG-c1", 1)))
    usage = attr.usage(sample(0, [gpu("GPU-0", instances=instances)]))
    assert [(u.ref.key, u.memory_bytes) for u in usage["MIG-c0"]] == [(a.ref.key, 3 * GIB)]
    assert [(u.ref.key, u.memory_bytes) for u in usage["MIG-c1"]] == [(b.ref.key, 4 * GIB)]
