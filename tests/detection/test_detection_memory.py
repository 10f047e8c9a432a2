"""Memory pressure on shared devices: threshold, `for`, hysteresis band, culprit by growth, kubelet-like ranking."""

from __future__ import annotations

import pytest
from detection_builders import GIB, attribution, gpu, mig, pod, proc, sample

from watchdog.config.detection import DetectionPolicy
from watchdog.detection import Detector
from watchdog.detection.memory import MemoryPressureDetector, relief_order
from watchdog.model import FindingKind, Severity

MIB = 1 << 20
POLICY = DetectionPolicy.model_validate(
    {"memory_pressure": {"min_free_bytes": GIB, "min_free_ratio": 0, "band_bytes": 512 * MIB, "band_ratio": 0}}
)


def shared_mig(tick, *, a_bytes, b_bytes, total=10 * GIB, used=None):
    used = a_bytes + b_bytes if used is None else used
    instance = mig(
        "MIG-s", gi=1, total=total, used=used, processes=(proc(100, mem=a_bytes), proc(200, mem=b_bytes))
    )
    return sample(tick, [gpu("GPU-0", instances=(instance,))])


@pytest.fixture
def pods():
    a = pod("team-a", "infer", priority=100, request=4 * GIB)
    b = pod("team-b", "train", priority=0, request=2 * GIB)
    return a, b


@pytest.fixture
def shared_attr(pods):
    a, b = pods
    return attribution(devices={"MIG-s": [a, b]}, processes={100: a, 200: b})


def pressure(findings):
    return [f for f in findings if f.kind is FindingKind.MEMORY_PRESSURE]


def test_pressure_needs_for_ticks_then_names_the_grower(shared_attr):
    detector = Detector(POLICY)
    b_bytes = [2 * GIB] * 10 + [5 * GIB + 512 * MIB] * 6  # 9.5 GiB used of 10: 0.5 GiB free < 1 GiB
    history = [detector.step(shared_mig(t, a_bytes=4 * GIB, b_bytes=b), shared_attr) for t, b in enumerate(b_bytes)]
    assert not pressure(history[11]) and not pressure(history[10])
    found = pressure(history[12])
    assert len(found) == 1
    f = found[0]
    assert f.first_tick == 10 and f.severity is Severity.CRITICAL
    assert f.culprit.key == "team-b/train" and [v.key for v in f.victims] == ["team-a/infer"]
    assert f.usage == {"team-a/infer": 4 * GIB, "team-b/train": 5.5 * GIB}
    assert f.needed == pytest.approx(GIB + 512 * MIB - 512 * MIB)  # threshold + band − free
    assert f.evidence["culprit_growth_bytes"] == int(3.5 * GIB)
    assert f.evidence["relief_order"] == "team-b/train,team-a/infer"  # B is above its request and lower priority
    assert f.domain == "mig/MIG-s" and f.key == "memory_pressure/mig/MIG-s"
    assert (f.gpu_uuid, f.mig_uuid) == ("GPU-0", "MIG-s")  # the device, for alerts and the controller


def test_hysteresis_band_keeps_it_open_until_clearly_relieved(shared_attr):
    detector = Detector(POLICY)
    free_gib = [3, 0.5, 0.5, 0.5, 1.2, 1.4, 1.2, 1.6, 0.5]
    history = []
    for t, free in enumerate(free_gib):
        b = int((10 - 4 - free) * GIB)
        history.append(pressure(detector.step(shared_mig(t, a_bytes=4 * GIB, b_bytes=b), shared_attr)))
    assert [bool(h) for h in history] == [False, False, False, True, True, True, True, False, False]


def test_a_device_with_one_pod_is_never_under_pressure(pods):
    a, _ = pods
    detector = Detector(POLICY)
    attr = attribution(devices={"MIG-s": [a]}, processes={100: a})
    for t in range(10):
        assert not pressure(detector.step(shared_mig(t, a_bytes=9 * GIB + 800 * MIB, b_bytes=0), attr))


def test_timesliced_gpu_is_a_shared_device(pods):
    a, b = pods
    detector = Detector(POLICY)
    attr = attribution(devices={"GPU-1": [a, b]}, processes={100: a, 200: b})
    for t in range(5):
        processes = (proc(100, mem=40 * GIB, sm=0.3), proc(200, mem=39 * GIB + 700 * MIB, sm=0.3))
        found = pressure(detector.step(sample(t, [gpu("GPU-1", processes=processes, used=int(79.7 * GIB))]), attr))
    assert found and found[0].domain == "timeslice/GPU-1"
    assert (found[0].gpu_uuid, found[0].mig_uuid) == ("GPU-1", "")


def test_missing_memory_keeps_the_finding_open(shared_attr):
    detector = Detector(POLICY)
    for t in range(4):
        detector.step(shared_mig(t, a_bytes=4 * GIB, b_bytes=5 * GIB + 700 * MIB), shared_attr)
    gap = mig("MIG-s", gi=1, total=None, used=None)
    still = pressure(detector.step(sample(4, [gpu("GPU-0", instances=(gap,))]), shared_attr))
    assert still and still[0].first_tick == 0
    # Kept open, but nothing was seen this tick: unobserved, and last_tick is the last reading, not now.
    assert still[0].observed is False and still[0].last_tick == 3


def test_pressure_nobody_can_see_is_never_reported_as_current(shared_attr):
    """Reviewer t3: pressure seen at ticks 0–9, then memory reads fail; the finding must not look fresh at 30."""
    detector = Detector(POLICY.model_copy(update={"memory_pressure": POLICY.memory_pressure.model_copy(
        update={"stale_ticks": 40})}))
    for t in range(10):
        found = pressure(detector.step(shared_mig(t, a_bytes=4 * GIB, b_bytes=5 * GIB + 700 * MIB), shared_attr))
    assert found[0].observed is True and found[0].last_tick == 9
    blind = mig("MIG-s", gi=1, total=None, used=None, processes=(proc(100), proc(200)))
    for t in range(10, 50):
        found = pressure(detector.step(sample(t, [gpu("GPU-0", instances=(blind,))]), shared_attr))
        assert [(f.observed, f.last_tick, f.first_tick) for f in found] == [(False, 9, 0)]
    assert not pressure(detector.step(sample(50, [gpu("GPU-0", instances=(blind,))]), shared_attr))  # stale_ticks


def test_a_small_allocation_within_its_request_does_not_make_the_culprit():
    """Reviewer t5: serve grows 64 MiB inside its request while hog sits far above its own: hog is the culprit."""
    hog = pod("batch", "hog", priority=10, request=8 * GIB)
    serve = pod("prod", "serve", priority=50000, request=8 * GIB)
    attr = attribution(devices={"GPU-1": [hog, serve]}, processes={100: hog, 200: serve})
    detector = Detector()
    for t in range(70):
        serve_bytes = 6 * GIB + (64 * MIB if t >= 60 else 0)
        used = 30 * GIB + serve_bytes + 2 * GIB - 30 * MIB  # free just under the 2 GiB (5 % of 40 GiB) threshold
        processes = (proc(100, mem=30 * GIB), proc(200, mem=serve_bytes))
        found = pressure(detector.step(sample(t, [gpu("GPU-1", total=40 * GIB, used=used, processes=processes)]), attr))
    [f] = found
    assert f.culprit.key == "batch/hog" and [v.key for v in f.victims] == ["prod/serve"]
    assert f.evidence["relief_order"] == "batch/hog,prod/serve"


def test_a_pod_gone_for_stale_ticks_is_forgotten_and_returns_as_new(pods):
    a, b = pods
    policy = POLICY.model_copy(update={"memory_pressure": POLICY.memory_pressure.model_copy(update={"stale_ticks": 5})})
    built: list[MemoryPressureDetector] = []

    def memory_source(policy, *, tenant_of):  # the registry's shape, keeping the source to look inside it
        built.append(MemoryPressureDetector(policy, tenant_of=tenant_of))
        return built[-1]

    detector = Detector(policy, sources=(memory_source,))
    both = attribution(devices={"MIG-s": [a, b]}, processes={100: a, 200: b})
    alone = attribution(devices={"MIG-s": [a, pod("team-c", "c")]}, processes={100: a})
    for t in range(3):
        detector.step(shared_mig(t, a_bytes=4 * GIB, b_bytes=5 * GIB), both)
    for t in range(3, 12):  # b away for 9 ticks (> 5): its row and arrival tick are dropped
        detector.step(shared_mig(t, a_bytes=4 * GIB, b_bytes=0), alone)
    state = built[0]._devices["MIG-s"]
    assert "team-b/train" not in state.first_seen and "team-b/train" not in state.memory.members
    for t in range(12, 16):  # back with 5.5 GiB: it arrived within the window, so it grew from nothing
        found = pressure(detector.step(shared_mig(t, a_bytes=4 * GIB, b_bytes=5 * GIB + 512 * MIB), both))
    assert found[0].culprit.key == "team-b/train" and found[0].evidence["culprit_growth_bytes"] == int(5.5 * GIB)


def test_relief_order_ranks_like_the_kubelet():
    over_low = pod("x", "over-low", priority=0, request=1 * GIB)
    over_high = pod("x", "over-high", priority=10, request=1 * GIB)
    under = pod("x", "under", priority=0, request=8 * GIB)
    attr = attribution(devices={"d": [over_low, over_high, under]})
    usage = {"x/over-low": 2 * GIB, "x/over-high": 5 * GIB, "x/under": 4 * GIB}
    order = relief_order((under.ref, over_high.ref, over_low.ref), usage, attr)
    assert [r.name for r in order] == ["over-low", "over-high", "under"]
