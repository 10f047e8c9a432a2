"""A device in quarantine, or whose UUID two devices claim, is nobody's victim, culprit or shield."""

from __future__ import annotations

import dataclasses

import pytest
from detection_builders import GIB, attribution, gpu, mig, pod, proc, sample

from watchdog.config.detection import DetectionPolicy
from watchdog.detection import Detector
from watchdog.detection.domains import devices_of, domains_of
from watchdog.detection.trust import ambiguous_uuids, trusted
from watchdog.model import FindingKind, NodeSample, XidEvent

OWNER, SNEAK = pod("team-a", "owner"), pod("team-b", "sneak")
MIB = 1 << 20
PRESSURE = DetectionPolicy.model_validate(
    {"memory_pressure": {"min_free_bytes": GIB, "min_free_ratio": 0, "band_bytes": 512 * MIB, "band_ratio": 0}}
)


def xid(uuid: str, *, index: int, at: float, gi: int | None = None) -> XidEvent:
    return XidEvent(gpu_index=index, gpu_uuid=uuid, xid=31, event_type=8, timestamp=at, gpu_instance=gi)


def sneaky(tick: int, *, quarantined=frozenset(), xids=()) -> NodeSample:
    """SNEAK's process 20 runs on OWNER's MIG-a of GPU-0; GPU-1 is a plain GPU of OWNER's."""
    instances = (mig("MIG-a", gi=1, processes=(proc(10, mem=GIB), proc(20, mem=2 * GIB))),
                 mig("MIG-b", gi=2, processes=(proc(21, mem=GIB),)))
    node = sample(tick, [gpu("GPU-0", instances=instances), gpu("GPU-1", index=1)], xids=xids)
    return dataclasses.replace(node, quarantined=frozenset(quarantined))


ATTR = attribution(devices={"MIG-a": [OWNER], "MIG-b": [SNEAK], "GPU-1": [OWNER]},
                   processes={10: OWNER, 20: SNEAK, 21: SNEAK})


def of(kind, findings):
    return [f for f in findings if f.kind is kind]


@pytest.mark.parametrize("quarantined", [{"MIG-a"}, {"GPU-0"}], ids=["the-mig", "its-gpu"])
def test_no_unauthorized_finding_through_a_quarantined_device(quarantined):
    detector = Detector()
    for t in range(8):
        findings = detector.step(sneaky(t, quarantined=quarantined), ATTR)
        assert not of(FindingKind.UNAUTHORIZED, findings)


@pytest.mark.parametrize("quarantined", [{"MIG-a"}, {"GPU-0"}], ids=["the-mig", "its-gpu"])
def test_a_finding_open_before_the_quarantine_is_gone_with_it(quarantined):
    detector = Detector()
    for t in range(6):
        before = detector.step(sneaky(t), ATTR)
    assert [f.mig_uuid for f in of(FindingKind.UNAUTHORIZED, before)] == ["MIG-a"]
    during = detector.step(sneaky(6, quarantined=quarantined), ATTR)
    assert not [f for f in during if f.gpu_uuid in quarantined or f.mig_uuid in quarantined]
    assert not of(FindingKind.UNAUTHORIZED, during)


def test_the_xid_events_of_a_quarantined_gpu_are_skipped():
    detector = Detector()
    events = (xid("GPU-0", index=0, at=0.0, gi=1), xid("", index=0, at=0.0), xid("GPU-1", index=1, at=0.0))
    findings = detector.step(sneaky(0, quarantined={"GPU-0"}, xids=events), ATTR)
    [finding] = of(FindingKind.XID, findings)
    assert finding.gpu_uuid == "GPU-1" and [v.key for v in finding.victims] == ["team-a/owner"]


def test_an_xid_on_a_healthy_gpu_names_no_pod_through_its_quarantined_instance():
    detector = Detector()
    findings = detector.step(sneaky(0, quarantined={"MIG-a"}, xids=(xid("GPU-0", index=0, at=0.0, gi=1),)), ATTR)
    [finding] = of(FindingKind.XID, findings)
    assert finding.victims == () and finding.culprit is None  # GI 1 holds MIG-a alone: nobody to name


def test_memory_pressure_is_not_judged_on_a_quarantined_gpu():
    a, b = pod("team-a", "infer", priority=100, request=4 * GIB), pod("team-b", "train", request=2 * GIB)
    attr = attribution(devices={"GPU-t": [a, b]}, processes={100: a, 200: b})
    detector = Detector(PRESSURE)
    for t in range(16):
        grown = 2 * GIB if t < 10 else 5 * GIB + 512 * MIB  # 9.5 GiB of 10 used from tick 10
        node = sample(t, [gpu("GPU-t", total=10 * GIB, used=4 * GIB + grown,
                              processes=(proc(100, mem=4 * GIB), proc(200, mem=grown)))])
        findings = detector.step(dataclasses.replace(node, quarantined=frozenset({"GPU-t"}) if t >= 8 else frozenset()),
                                 attr)
        assert not findings


def test_the_quarantine_lifted_judges_the_device_again():
    detector = Detector()
    for t in range(6):
        detector.step(sneaky(t, quarantined={"MIG-a"}), ATTR)
    history = [of(FindingKind.UNAUTHORIZED, detector.step(sneaky(t), ATTR)) for t in range(6, 12)]
    assert [bool(h) for h in history] == [False] * 4 + [True, True]  # `for_ticks` counted afresh


# ----------------------------------------------------------------------------------------- ambiguous identity


def test_a_duplicated_mig_uuid_blames_nobody():
    """Instance 2 reports instance 1's UUID: the kubelet gave MIG-1 to OWNER, so SNEAK's process on the impostor
    would read as SNEAK running on OWNER's device."""
    detector = Detector()
    attr = attribution(devices={"MIG-1": [OWNER], "MIG-2": [SNEAK]}, processes={10: OWNER, 20: SNEAK})
    for t in range(10):
        instances = (mig("MIG-1", gi=1, processes=(proc(10, mem=GIB),)),
                     mig("MIG-1", gi=2, processes=(proc(20, mem=GIB),)))
        findings = detector.step(sample(t, [gpu("GPU-0", instances=instances)]), attr)
        assert not [f for f in findings if f.culprit is not None or f.victims]
    assert detector.last_failures == ()


def test_a_duplicated_gpu_uuid_neither_crashes_nor_blames():
    detector = Detector()
    attr = attribution(devices={"GPU-0": [OWNER], "MIG-x": [SNEAK]}, processes={10: OWNER, 20: SNEAK})
    for t in range(10):
        node = sample(t, [gpu("GPU-0", index=0, instances=(mig("MIG-x", gi=1, processes=(proc(20, mem=GIB),)),)),
                          gpu("GPU-0", index=1, processes=(proc(10, mem=GIB), proc(20, mem=GIB)))],
                      xids=(xid("GPU-0", index=1, at=float(t)),))
        findings = detector.step(node, attr)
        assert findings == () and detector.last_failures == ()


def test_devices_and_domains_of_leave_an_ambiguous_uuid_out():
    node = sample(0, [gpu("GPU-0", index=0, instances=(mig("MIG-x", gi=1), mig("MIG-y", gi=2))),
                      gpu("GPU-0", index=1), gpu("GPU-2", index=2, instances=(mig("MIG-y", gi=1),))])
    attr = attribution(devices={"MIG-x": [OWNER], "GPU-0": [SNEAK]})
    assert ambiguous_uuids(node) == {"GPU-0", "MIG-y"}
    devices = devices_of(node, attr)
    assert devices == [] and domains_of(devices) == []


def test_trusted_returns_the_same_sample_when_nothing_is_left_out():
    node = sneaky(0, quarantined={"GPU-9"})
    assert trusted(node) == (node, frozenset({"GPU-9"})) and trusted(node)[0] is node
