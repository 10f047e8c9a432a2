"""Unauthorized device use and Xid faults: who is named, and when nothing may be said."""

from __future__ import annotations

import dataclasses

import pytest
from detection_builders import GIB, attribution, gpu, mig, pod, proc, sample

from watchdog.config.detection import DetectionPolicy, XidDetectionPolicy
from watchdog.detection import Detector, XidClass, classify
from watchdog.model import FindingKind, Severity, XidEvent

OWNER = pod("team-a", "owner")
SNEAK = pod("team-b", "sneak")


def only(kind, findings):
    return [f for f in findings if f.kind is kind]


def sneaky_node(tick):
    instances = (
        mig("MIG-a", gi=1, processes=(proc(10, mem=GIB), proc(20, mem=2 * GIB))),
        mig("MIG-b", gi=2, processes=(proc(21, mem=GIB),)),
    )
    return sample(tick, [gpu("GPU-0", instances=instances)])


def test_process_on_a_device_never_given_to_its_pod():
    detector = Detector()
    attr = attribution(devices={"MIG-a": [OWNER], "MIG-b": [SNEAK]}, processes={10: OWNER, 20: SNEAK, 21: SNEAK})
    history = [only(FindingKind.UNAUTHORIZED, detector.step(sneaky_node(t), attr)) for t in range(6)]
    assert [bool(h) for h in history] == [False] * 4 + [True, True]
    [f] = history[-1]
    assert f.culprit.key == "team-b/sneak" and [v.key for v in f.victims] == ["team-a/owner"]
    assert f.key == "unauthorized/MIG-a/team-b/sneak" and f.evidence["used_memory_bytes"] == 2 * GIB
    assert f.severity is Severity.CRITICAL and f.tenant == "team-b"
    assert (f.gpu_uuid, f.mig_uuid) == ("GPU-0", "MIG-a")


@pytest.mark.parametrize(
    "attr",
    [
        attribution(devices={"MIG-a": [OWNER], "MIG-b": [SNEAK]}, processes={10: OWNER, 20: SNEAK}, healthy=False),
        attribution(devices={"MIG-a": [OWNER], "MIG-b": [SNEAK]}, processes={10: OWNER}),  # pid 20 unknown
        attribution(
            devices={"MIG-a": [OWNER], "MIG-b": [pod("team-b", "sneak", created=1.0)]},
            processes={10: OWNER, 20: pod("team-b", "sneak", created=1.0)},
        ),  # a pod seconds old: its assignment may not be listed yet
    ],
    ids=["attribution-unhealthy", "unknown-pid", "young-pod"],
)
def test_absence_of_data_is_never_unauthorized(attr):
    detector = Detector()
    for t in range(10):
        assert not only(FindingKind.UNAUTHORIZED, detector.step(sneaky_node(t), attr))


def test_an_unhealthy_tick_neither_raises_nor_clears():
    detector = Detector()
    good = attribution(devices={"MIG-a": [OWNER], "MIG-b": [SNEAK]}, processes={10: OWNER, 20: SNEAK})
    bad = attribution(devices={}, processes={}, healthy=False)
    for t in range(5):
        detector.step(sneaky_node(t), good)
    assert only(FindingKind.UNAUTHORIZED, detector.step(sneaky_node(5), bad))


def test_an_unobserved_finding_says_so_and_expires():
    detector = Detector(DetectionPolicy.model_validate({"unauthorized": {"stale_ticks": 3}}))
    good = attribution(devices={"MIG-a": [OWNER], "MIG-b": [SNEAK]}, processes={10: OWNER, 20: SNEAK})
    bad = attribution(devices={}, processes={}, healthy=False)
    for t in range(5):
        detector.step(sneaky_node(t), good)
    history = [only(FindingKind.UNAUTHORIZED, detector.step(sneaky_node(t), bad)) for t in range(5, 9)]
    assert [[(f.observed, f.last_tick) for f in h] for h in history] == [[(False, 4)]] * 3 + [[]]


@pytest.mark.parametrize(
    ("intruder", "policy"),
    [
        (pod("gpu-operator", "nvidia-cuda-validator"), {}),
        (pod("kube-system", "dcgm"), {}),
        (pod("ops", "probe", labels={"app": "gpu-probe", "tier": "ops"}), {"exempt_labels": {"app": "gpu-probe"}}),
        (pod("x", "y"), {"exempt_namespaces": ["x"]}),
    ],
    ids=["gpu-operator", "kube-system", "labels", "configured-namespace"],
)
def test_exempt_pods_may_use_any_device(intruder, policy):
    detector = Detector(DetectionPolicy.model_validate({"unauthorized": policy}))
    attr = attribution(devices={"MIG-a": [OWNER], "MIG-b": [SNEAK]}, processes={10: OWNER, 20: intruder})
    for t in range(10):
        assert not only(FindingKind.UNAUTHORIZED, detector.step(sneaky_node(t), attr))


def test_label_selector_needs_every_pair():
    detector = Detector(DetectionPolicy.model_validate({"unauthorized": {"exempt_labels": {"app": "p", "t": "o"}}}))
    half = pod("team-b", "sneak", labels={"app": "p"})
    attr = attribution(devices={"MIG-a": [OWNER], "MIG-b": [half]}, processes={10: OWNER, 20: half})
    history = [only(FindingKind.UNAUTHORIZED, detector.step(sneaky_node(t), attr)) for t in range(6)]
    assert history[-1] and history[-1][0].culprit.key == "team-b/sneak"


@pytest.mark.parametrize(
    "state", [{"deleting": True}, {"phase": "Succeeded"}, {"phase": "Failed"}], ids=["deleting", "succeeded", "failed"]
)
def test_a_pod_that_is_not_live_is_not_an_intruder(state):
    """A terminating pod's assignment is gone before its process exits: that is not unauthorized use."""
    leaving = dataclasses.replace(SNEAK, **state)
    detector = Detector()
    attr = attribution(devices={"MIG-a": [OWNER]}, processes={10: OWNER, 20: leaving})
    for t in range(10):
        assert not only(FindingKind.UNAUTHORIZED, detector.step(sneaky_node(t), attr))


# ------------------------------------------------------------------------------------------------------ Xid

XP = XidDetectionPolicy()


@pytest.mark.parametrize(
    ("xid", "event_type", "action", "expected"),
    [
        (13, 0x8, None, XidClass.APPLICATION),
        (43, 0x8, None, XidClass.APPLICATION),
        (94, 0x8, None, XidClass.CONTAINED),
        (79, 0x8, None, XidClass.RESET),
        (48, 0x8, None, XidClass.RESET),
        (12345, 0x8, None, XidClass.UNKNOWN),
        (0, 0x1, None, XidClass.IGNORED),  # single-bit ECC
        (0, 0x100, None, XidClass.IGNORED),  # MIG reconfiguration
        (0, 0x2, None, XidClass.RESET),  # double-bit ECC
        (13, 0x8, 1, XidClass.RESET),  # the driver's verdict (GPU reset) wins over our list
        (0, 0x8000, 0, XidClass.IGNORED),
        (79, 0x8, 0, XidClass.CONTAINED),  # the driver says no recovery is needed: our reset list must not overrule
        (13, 0x8, 0, XidClass.APPLICATION),
        (0, 0x2, 0, XidClass.CONTAINED),
    ],
)
def test_classify(xid, event_type, action, expected):
    event = XidEvent(0, "GPU-0", xid, event_type, 1.0, recovery_action=action)
    assert classify(event, XP)[0] is expected


def mig_node(tick, xids=()):
    instances = (mig("MIG-a", gi=1), mig("MIG-b", gi=2))
    return sample(tick, [gpu("GPU-0", instances=instances)], xids=xids)


ATTR = attribution(devices={"MIG-a": [OWNER], "MIG-b": [SNEAK]})


def test_application_xid_on_a_gpu_instance_names_only_its_pod():
    detector = Detector()
    event = XidEvent(0, "GPU-0", 13, 0x8, 5.0, gpu_instance=2, compute_instance=0)
    [f] = only(FindingKind.XID, detector.step(mig_node(5, (event,)), ATTR))
    assert f.severity is Severity.WARNING and f.culprit.key == "team-b/sneak" and f.victims == ()
    assert f.key == "xid/GPU-0/gi2/13" and f.evidence["class"] == "application"
    assert (f.gpu_uuid, f.mig_uuid) == ("GPU-0", "")  # a GPU instance may hold several MIG devices


def test_reset_xid_without_instance_scopes_the_whole_gpu_and_holds_then_expires():
    detector = Detector(DetectionPolicy.model_validate({"xid": {"hold_seconds": 10, "drain": True}}))
    event = XidEvent(0, "GPU-0", 79, 0x8, 5.0)
    [f] = only(FindingKind.XID, detector.step(mig_node(5, (event,)), ATTR))
    assert f.severity is Severity.CRITICAL and f.culprit is None
    assert {v.key for v in f.victims} == {"team-a/owner", "team-b/sneak"} and f.evidence["action"] == "drain"
    again = XidEvent(0, "GPU-0", 79, 0x8, 9.0)
    [f] = only(FindingKind.XID, detector.step(mig_node(9, (again,)), ATTR))
    assert f.evidence["count"] == 2 and f.first_tick == 5 and f.last_tick == 9
    assert only(FindingKind.XID, detector.step(mig_node(19), ATTR))
    assert not only(FindingKind.XID, detector.step(mig_node(20), ATTR))


def test_driver_verdict_none_makes_a_listed_reset_xid_a_warning():
    detector = Detector()
    event = XidEvent(0, "GPU-0", 79, 0x8, 5.0, recovery_action=0)
    [f] = only(FindingKind.XID, detector.step(mig_node(5, (event,)), ATTR))
    assert f.severity is Severity.WARNING and f.evidence["action"] == "none" and f.evidence["class"] == "contained"


def test_xid_on_a_lost_gpu_names_the_pods_the_kubelet_assigned_it():
    """Xid 79 is usually read after the GPU fell off the bus: the sample has no devices for it any more."""
    detector = Detector()
    detector.step(mig_node(4), ATTR)  # seen once with its MIG layout
    lost = sample(5, [gpu("GPU-0", lost=True)], xids=(XidEvent(0, "GPU-0", 79, 0x8, 5.0),))
    [f] = only(FindingKind.XID, detector.step(lost, ATTR))
    assert {v.key for v in f.victims} == {"team-a/owner", "team-b/sneak"} and f.severity is Severity.CRITICAL
    on_instance = sample(6, [gpu("GPU-0", lost=True)], xids=(XidEvent(0, "GPU-0", 79, 0x8, 6.0, gpu_instance=2),))
    found = only(FindingKind.XID, detector.step(on_instance, ATTR))
    [g] = [f for f in found if f.key == "xid/GPU-0/gi2/79"]
    assert [v.key for v in g.victims] == ["team-b/sneak"]


def test_xid_on_a_lost_non_mig_gpu_names_its_assigned_pods():
    detector = Detector()
    attr = attribution(devices={"GPU-7": [OWNER, SNEAK]})
    lost = sample(1, [gpu("GPU-7", index=3, lost=True)], xids=(XidEvent(3, "", 79, 0x8, 1.0),))
    [f] = only(FindingKind.XID, detector.step(lost, attr))
    assert {v.key for v in f.victims} == {"team-a/owner", "team-b/sneak"}
