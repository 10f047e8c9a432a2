"""Interference findings the evidence cannot carry: fair shares, what may be acted on, and who may be blamed.

Each test mirrors a case a reviewer reproduced: a pod at its fair share of a time-sliced GPU, a victim whose own
demand falls next to a greedy neighbour, a same-tenant power hog next to a small cross-tenant pod, clocks slowed by
node-level causes, and a finding kept open while its GPU is missing from the samples.
"""

from __future__ import annotations

import pytest
from detection_builders import MAX_CLOCK, SW_POWER_CAP, Noise, attribution, gpu, mig, pod, proc, sample

from watchdog.config.detection import DetectionPolicy
from watchdog.detection import Detector
from watchdog.detection.domains import devices_of, domains_of
from watchdog.detection.victim_signals import fair_levels
from watchdog.model import FindingKind, NodeSample, Severity

HW_SLOWDOWN, HW_THERMAL, HW_POWER_BRAKE, SW_THERMAL = 0x8, 0x40, 0x80, 0x20


def timesliced(tick: int, *, a: float, b: float) -> NodeSample:
    processes = (proc(100, sm=a, mem=1 << 30), proc(200, sm=b, mem=1 << 30))
    return sample(tick, [gpu("GPU-1", processes=processes, gpu_util=min(1.0, a + b))])


def interference(findings) -> list:
    return [f for f in findings if f.kind is FindingKind.INTERFERENCE]


def water_fill(demand_a: float, demand_b: float) -> tuple[float, float]:
    """What a work-conserving, max-min fair scheduler gives two pods on one GPU (the simulator's rule)."""
    fair = 0.5
    if demand_a < fair:
        return demand_a, min(demand_b, 1 - demand_a)
    if demand_b < fair:
        return min(demand_a, 1 - demand_b), demand_b
    return fair, fair


@pytest.fixture
def serve_fill():
    serve, fill = pod("prod", "serve", priority=50000), pod("batch", "fill", priority=10)
    return attribution(devices={"GPU-1": [serve, fill]}, processes={100: serve, 200: fill})


def test_fair_levels_water_fill_over_what_the_others_get():
    a, b, c = pod("t1", "a"), pod("t2", "b"), pod("t3", "c")
    attr = attribution(devices={"GPU-1": [a, b, c]}, processes={1: a, 2: b, 3: c})
    s = sample(1, [gpu("GPU-1", processes=(proc(1, sm=0.05), proc(2, sm=0.3), proc(3, sm=0.65)), gpu_util=1.0)])
    [_, timeslice] = domains_of(devices_of(s, attr))
    levels = fair_levels(timeslice)
    # b asking for everything: a keeps its 0.05, b and c split the rest. c asking for everything: a and b keep what
    # they get (both under the level), c may have the rest, which it already has. a: b keeps 0.3, a and c split 0.7.
    assert levels["t2/b"] == pytest.approx(0.475)
    assert levels["t3/c"] == pytest.approx(0.65)
    assert levels["t1/a"] == pytest.approx(0.35)


def test_a_pod_held_at_its_fair_level_by_a_greedy_neighbour_is_a_victim(serve_fill):
    """serve wants 0.75; once fill wants everything, time-slicing (blind to priority) holds serve at 0.5."""
    detector, noise = Detector(), Noise()
    found = []
    for t in range(150):
        a, b = water_fill(0.75, 1.0 if t >= 50 else 0.1)
        found = interference(detector.step(timesliced(t, a=noise(a, 0.01), b=noise(b, 0.01)), serve_fill))
        if t < 50:
            assert not found
    [f] = found
    assert f.culprit.key == "batch/fill" and [v.key for v in f.victims] == ["prod/serve"]
    assert f.severity is Severity.CRITICAL and f.evidence["fair_share"] == pytest.approx(0.5, abs=0.02)


def test_trap_greedy_neighbour_then_own_drop_is_never_found(serve_fill):
    """trap-greedy-own-drop: serve asks 0.4 (all of it granted), fill turns greedy, then serve's traffic falls."""
    detector, noise = Detector(), Noise(seed=31)
    for t in range(300):
        a, b = water_fill(0.4 if t < 150 else 0.15, 1.0 if t >= 50 else 0.1)
        assert not interference(detector.step(timesliced(t, a=noise(a, 0.01), b=noise(b, 0.01)), serve_fill))


def test_trap_diurnal_load_next_to_a_greedy_neighbour_is_never_found(serve_fill):
    """trap-diurnal-greedy: serve's demand swings 0.15–0.45, always under its fair share, so it always gets it."""
    import math

    detector, noise = Detector(), Noise(seed=32)
    for t in range(300):
        a, b = water_fill(0.3 + 0.15 * math.sin(2 * math.pi * t / 100), 1.0 if t >= 40 else 0.1)
        assert not interference(detector.step(timesliced(t, a=noise(a, 0.01), b=noise(b, 0.01)), serve_fill))


def test_a_tenants_own_signal_judges_even_below_the_fair_level(serve_fill):
    policy = DetectionPolicy.model_validate({"victim_signal_overrides": {"prod": {"query": "p99"}}})
    detector, noise = Detector(policy), Noise()
    for t in range(70):
        a, b = (0.45, 0.55) if t >= 40 else (0.6, 0.2)  # an unfair scheduler (MPS): serve is below its share
        latency = noise(0.050, 0.002) + (0.030 if t >= 40 else 0.0)
        signals = {"prod/serve": latency}
        found = interference(detector.step(timesliced(t, a=a, b=b), serve_fill, external_signals=signals))
    [f] = found
    assert f.severity is Severity.CRITICAL and f.evidence["signal"] == "override"
    assert f.evidence["fair_share"] == pytest.approx(0.5)


def test_nvml_alone_never_blames_a_neighbour_for_a_pod_below_its_fair_level(serve_fill):
    """Below its level a pod got all it asked for (max-min fairness): its lower share is its own demand."""
    detector = Detector()
    for t in range(70):
        a, b = (0.45, 0.55) if t >= 40 else (0.6, 0.2)
        assert not interference(detector.step(timesliced(t, a=a, b=b), serve_fill))


# ------------------------------------------------------------------------------------------------------ power


def three_instances(tick: int, *, infer: float, train: float, tiny: float, capped: bool, reasons: int = SW_POWER_CAP):
    instances = (
        mig("MIG-a", gi=1, profile="3g.40gb", sm=infer),
        mig("MIG-a2", gi=2, profile="3g.40gb", sm=train),
        mig("MIG-c", gi=3, profile="1g.10gb", sm=tiny),
    )
    clock = MAX_CLOCK * (0.75 if capped else 1.0)
    return sample(tick, [gpu("GPU-0", instances=instances, clock=clock, reasons=reasons if capped else 0)])


@pytest.fixture
def same_tenant_attr():
    infer, train, tiny = pod("team-a", "infer", priority=1000), pod("team-a", "train"), pod("team-c", "tiny")
    return attribution(devices={"MIG-a": [infer], "MIG-a2": [train], "MIG-c": [tiny]})


def test_a_small_slice_is_not_blamed_for_a_same_tenant_power_hog(same_tenant_attr):
    """Reviewer t2: team-a's own 3g pod causes the cap; team-c's 1g pod starts at the same time and correlates."""
    detector, noise = Detector(), Noise()
    for t in range(90):
        on = t >= 40
        s = three_instances(
            t, infer=noise(0.8, 0.02), train=noise(1.0 if on else 0.05, 0.02), tiny=noise(0.6 if on else 0.1, 0.02),
            capped=on,
        )
        assert not interference(detector.step(s, same_tenant_attr))


def test_a_small_slice_whose_own_load_ramps_is_not_a_victim_of_the_cap(same_tenant_attr):
    """trap-same-tenant-power-mig: the cap lowers tiny's work done, but its own ramp (0.1 → 0.3) still shows."""
    detector, noise = Detector(), Noise(seed=33)
    for t in range(120):
        on = t >= 80
        s = three_instances(
            t, infer=noise(0.39 if on else 0.8, 0.02), train=noise(0.47 if on else 0.05, 0.02),
            tiny=noise(0.29 if on else 0.1, 0.02), capped=on,
        )
        assert not interference(detector.step(s, same_tenant_attr))


@pytest.mark.parametrize("reasons", [HW_SLOWDOWN, HW_THERMAL, HW_POWER_BRAKE])
def test_node_level_slowdowns_are_not_contention_by_default(reasons):
    victim, hog = pod("team-a", "infer", priority=1000), pod("team-b", "train")
    attr = attribution(devices={"MIG-a": [victim], "MIG-a2": [hog], "MIG-c": [pod("team-c", "x")]})
    detector = Detector()
    for t in range(70):
        on = t >= 40
        s = three_instances(t, infer=0.8, train=1.0 if on else 0.05, tiny=0.05, capped=on, reasons=reasons)
        assert not interference(detector.step(s, attr))


def test_sw_thermal_slowdown_is_contention():
    victim, hog = pod("team-a", "infer", priority=1000), pod("team-b", "train")
    attr = attribution(devices={"MIG-a": [victim], "MIG-a2": [hog], "MIG-c": [pod("team-c", "x")]})
    detector = Detector()
    for t in range(70):
        on = t >= 40
        found = interference(detector.step(
            three_instances(t, infer=0.8, train=1.0 if on else 0.05, tiny=0.05, capped=on, reasons=SW_THERMAL), attr
        ))
    assert [f.culprit.key for f in found] == ["team-b/train"] and found[0].severity is Severity.CRITICAL


def test_a_finding_kept_open_through_a_gap_is_unobserved():
    victim, hog = pod("team-a", "infer", priority=1000), pod("team-b", "train")
    attr = attribution(devices={"MIG-a": [victim], "MIG-a2": [hog], "MIG-c": [pod("team-c", "x")]})
    detector = Detector()
    for t in range(60):
        on = t >= 40
        found = interference(detector.step(three_instances(t, infer=0.8, train=1.0 if on else 0.05, tiny=0.05,
                                                           capped=on), attr))
    assert found and found[0].observed is True and found[0].last_tick == 59
    for t in range(60, 70):  # the GPU is missing from every sample
        [gap] = interference(detector.step(sample(t, []), attr))
        assert gap.observed is False and gap.last_tick == 59
    [back] = interference(detector.step(three_instances(70, infer=0.8, train=1.0, tiny=0.05, capped=True), attr))
    assert back.observed is True and back.last_tick == 70
