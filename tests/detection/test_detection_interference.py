"""Interference: the CPI²-style detector fires on real antagonists and on none of the known traps."""

from __future__ import annotations

import pytest
from detection_builders import MAX_CLOCK, SW_POWER_CAP, Noise, attribution, diurnal, gpu, mig, pod, proc, sample

from watchdog.config.detection import DetectionPolicy
from watchdog.detection import Detector
from watchdog.model import FindingKind, NodeSample, Severity

ONSET = 40
TICKS = 70


def power_sample(tick: int, *, a: float | None, b: float | None, c: float = 0.05, loss: float = 0.0) -> NodeSample:
    """An MIG GPU: A on a 3g instance, B and C on 1g instances; `loss` > 0 means the power cap is pulling clocks."""
    instances = (
        mig("MIG-a", gi=1, profile="3g.40gb", sm=a),
        mig("MIG-b", gi=2, sm=b),
        mig("MIG-c", gi=3, sm=c),
    )
    reasons = SW_POWER_CAP if loss > 0 else 0
    return sample(tick, [gpu("GPU-0", instances=instances, clock=MAX_CLOCK * (1 - loss), reasons=reasons)])


def timeslice_sample(tick: int, *, a: float | None, b: float | None) -> NodeSample:
    busy = min(1.0, (a or 0) + (b or 0))
    processes = (proc(100, sm=a, mem=1 << 30), proc(200, sm=b, mem=1 << 30))
    return sample(tick, [gpu("GPU-1", processes=processes, gpu_util=busy)])


def run(detector: Detector, samples, attr, **kwargs) -> list[tuple]:
    return [detector.step(s, attr, **kwargs) for s in samples]


def interference(history: list[tuple]) -> list:
    return [f for tick in history for f in tick if f.kind is FindingKind.INTERFERENCE]


@pytest.fixture
def mig_attr(victim_pod, antagonist_pod, bystander_pod):
    return attribution(devices={"MIG-a": [victim_pod], "MIG-b": [antagonist_pod], "MIG-c": [bystander_pod]})


@pytest.fixture
def ts_attr(victim_pod, antagonist_pod):
    return ts_attribution(victim_pod, antagonist_pod)


def ts_attribution(a, b):
    return attribution(devices={"GPU-1": [a, b]}, processes={100: a, 200: b})


def test_power_antagonist_on_another_mig_instance_is_found(detector, mig_attr):
    noise = Noise()
    samples = [
        power_sample(
            t,
            a=noise(0.8, 0.02),
            b=noise(1.0 if t >= ONSET else 0.05, 0.02),
            loss=0.25 if t >= ONSET else 0.0,
        )
        for t in range(TICKS)
    ]
    history = run(detector, samples, mig_attr)
    assert not interference(history[:ONSET])
    last = [f for f in history[-1] if f.kind is FindingKind.INTERFERENCE]
    assert len(last) == 1
    finding = last[0]
    assert finding.culprit.key == "team-b/train"
    assert [v.key for v in finding.victims] == ["team-a/infer"]
    assert finding.resource == "power" and finding.domain == "gpu/GPU-0/power"
    assert (finding.gpu_uuid, finding.mig_uuid) == ("GPU-0", "")  # the board's power is shared by its instances
    assert finding.severity is Severity.CRITICAL and finding.tenant == "team-b"
    assert ONSET + 2 <= finding.first_tick <= ONSET + 5
    assert finding.evidence["correlation"] >= 0.5 and finding.evidence["z_score"] > 3
    assert finding.evidence["clock_loss"] == pytest.approx(0.25)
    # B's 1g instance is 1/7 of the GPU; usage is the share of the GPU it drives.
    assert finding.usage["team-b/train"] == pytest.approx(finding.evidence["antagonist_use"] / 7, abs=0.01)
    assert finding.key == "interference/gpu/GPU-0/power/team-b/train"
    assert {f.key for f in interference(history)} == {finding.key}


def test_timeslice_antagonist_taking_sm_share_is_found(detector, ts_attr):
    noise = Noise()
    samples = []
    for t in range(TICKS):
        a, b = (0.5, 0.5) if t >= ONSET else (0.6, 0.2)  # max-min fair: infer (wants 0.6) is held at 0.5
        samples.append(timeslice_sample(t, a=noise(a, 0.015), b=noise(b, 0.015)))
    history = run(detector, samples, ts_attr)
    found = [f for f in history[-1] if f.kind is FindingKind.INTERFERENCE and f.resource == "sm"]
    assert len(found) == 1
    assert found[0].culprit.key == "team-b/train" and [v.key for v in found[0].victims] == ["team-a/infer"]
    assert found[0].domain == "timeslice/GPU-1"
    assert found[0].severity is Severity.CRITICAL  # held at its fair level while a neighbour took the rest
    assert not interference(history[:ONSET])


def test_finding_resolves_when_the_antagonist_stops(detector, mig_attr):
    samples = [
        power_sample(t, a=0.8, b=1.0 if ONSET <= t < ONSET + 15 else 0.05, loss=0.25 if ONSET <= t < ONSET + 15 else 0)
        for t in range(TICKS)
    ]
    history = run(detector, samples, mig_attr)
    assert interference(history[ONSET + 10 : ONSET + 15])
    assert not interference(history[ONSET + 20 :])


def test_high_priority_antagonist_is_still_reported(victim_pod, bystander_pod):
    vip = pod("team-b", "train", priority=2_000_000)
    attr = attribution(devices={"MIG-a": [victim_pod], "MIG-b": [vip], "MIG-c": [bystander_pod]})
    detector = Detector()
    samples = [
        power_sample(t, a=0.8, b=1.0 if t >= ONSET else 0.05, loss=0.25 if t >= ONSET else 0) for t in range(60)
    ]
    found = interference(run(detector, samples, attr)[-1:])
    assert found and found[0].evidence["culprit_priority"] == 2_000_000


def test_victim_signal_override_uses_the_tenants_latency(victim_pod, antagonist_pod):
    policy = DetectionPolicy.model_validate(
        {"victim_signal_overrides": {"team-a": {"query": "p99", "min_deviation": 0.01}}}
    )
    detector = Detector(policy)
    attr = ts_attribution(victim_pod, antagonist_pod)
    noise = Noise()
    history = []
    for t in range(TICKS):
        a, b = (0.45, 0.55) if t >= ONSET else (0.6, 0.2)
        latency = noise(0.050, 0.002) + (0.030 if t >= ONSET else 0.0)
        history.append(
            detector.step(timeslice_sample(t, a=a, b=b), attr, external_signals={"team-a/infer": latency})
        )
    found = [f for f in history[-1] if f.resource == "sm"]
    assert found and found[0].evidence["signal"] == "override"
    assert found[0].culprit.key == "team-b/train" and found[0].severity is Severity.CRITICAL


def test_missing_override_values_are_never_zero(victim_pod, antagonist_pod):
    policy = DetectionPolicy.model_validate({"victim_signal_overrides": {"team-a": {"query": "p99"}}})
    detector = Detector(policy)
    attr = ts_attribution(victim_pod, antagonist_pod)
    for t in range(TICKS):
        a, b = (0.45, 0.55) if t >= ONSET else (0.6, 0.2)
        signals = {"team-a/infer": 0.05} if t < ONSET else {}  # the query stops answering exactly at the onset
        assert not interference([detector.step(timeslice_sample(t, a=a, b=b), attr, external_signals=signals)])


def test_hot_reload_keeps_baselines(detector, mig_attr):
    for t in range(ONSET):
        detector.step(power_sample(t, a=0.8, b=0.05), mig_attr)
    detector.set_policy(DetectionPolicy.model_validate({"interference": {"correlation_window": 30}}))
    history = [detector.step(power_sample(t, a=0.8, b=1.0, loss=0.25), mig_attr) for t in range(ONSET, ONSET + 10)]
    assert interference(history[-1:])


# ------------------------------------------------------------------------------------------------ the traps


def trap_synchronised_start_from_idle(t):
    on = t >= ONSET
    return power_sample(t, a=0.8 if on else 0.0, b=1.0 if on else 0.0, loss=0.25 if on else 0.0)


def trap_synchronised_ramp_from_low_load(t):
    on = t >= ONSET
    return power_sample(t, a=0.9 if on else 0.2, b=1.0 if on else 0.2, loss=0.25 if on else 0.0)


def trap_tenant_saturates_its_own_mig_instance(t):
    return power_sample(t, a=0.8, b=1.0 if t >= ONSET else 0.05)  # MIG isolates SMs: no cap, nobody suffers


def trap_victims_own_load_drops_on_power_capped_gpu(t):
    return power_sample(t, a=0.8 if t < ONSET else 0.2, b=1.0, loss=0.25 if t >= ONSET else 0)


def trap_noisy_sensors(t, noise=Noise(seed=3)):
    flap = noise.rng.random() < 0.3
    return power_sample(t, a=noise(0.7, 0.05), b=noise(0.6, 0.1), loss=noise(0.03, 0.02) if flap else 0.0)


def trap_missing_ticks(t):
    on = t >= ONSET
    if on and t % 2 == 0:
        return sample(t, [])  # GPU absent from the sample
    a = None if on else 0.8
    return power_sample(t, a=a, b=1.0 if on else 0.05, loss=0.25 if on else 0)


@pytest.mark.parametrize(
    "make",
    [
        trap_synchronised_start_from_idle,
        trap_synchronised_ramp_from_low_load,
        trap_tenant_saturates_its_own_mig_instance,
        trap_victims_own_load_drops_on_power_capped_gpu,
        trap_noisy_sensors,
        trap_missing_ticks,
    ],
)
def test_power_traps_do_not_fire(detector, mig_attr, make):
    assert not interference(run(detector, [make(t) for t in range(120)], mig_attr))


def trap_timeslice_diurnal(t, noise=Noise(seed=11)):
    a = diurnal(t, low=0.1, high=0.45, period=60)
    b = diurnal(t + 7, low=0.1, high=0.4, period=60)
    return timeslice_sample(t, a=noise(a, 0.02), b=noise(b, 0.02))


def trap_timeslice_own_load_drops(t):
    return timeslice_sample(t, a=0.6 if t < ONSET else 0.2, b=0.2)


def trap_timeslice_own_drop_then_neighbour_fills(t):
    a = 0.6 if t < ONSET else 0.2
    b = 0.2 if t < ONSET + 3 else 0.8  # the neighbour only takes what A left idle
    return timeslice_sample(t, a=a, b=b)


def trap_timeslice_synchronised_start(t):
    on = t >= ONSET
    return timeslice_sample(t, a=0.5 if on else 0.0, b=0.5 if on else 0.0)


def trap_timeslice_values_missing(t):
    on = t >= ONSET
    return timeslice_sample(t, a=None if on else 0.6, b=0.8 if on else 0.2)


@pytest.mark.parametrize(
    "make",
    [
        trap_timeslice_diurnal,
        trap_timeslice_own_load_drops,
        trap_timeslice_own_drop_then_neighbour_fills,
        trap_timeslice_synchronised_start,
        trap_timeslice_values_missing,
    ],
)
def test_timeslice_traps_do_not_fire(detector, ts_attr, make):
    assert not interference(run(detector, [make(t) for t in range(150)], ts_attr))


def test_same_tenant_neighbour_is_not_an_antagonist(detector):
    a, b = pod("team-a", "infer"), pod("team-a", "batch")
    attr = attribution(devices={"GPU-1": [a, b]}, processes={100: a, 200: b})
    samples = [timeslice_sample(t, a=0.45 if t >= ONSET else 0.6, b=0.55 if t >= ONSET else 0.2) for t in range(TICKS)]
    assert not interference(run(detector, samples, attr))


def test_gi_domain_dram_antagonist_between_compute_instances(detector, victim_pod, antagonist_pod):
    attr = attribution(devices={"MIG-x": [victim_pod], "MIG-y": [antagonist_pod]})
    history = []
    for t in range(TICKS):
        on = t >= ONSET
        instances = (
            mig("MIG-x", gi=1, ci=0, profile="1c.4g.40gb", sm=0.5 if on else 0.8, dram=0.95 if on else 0.5),
            mig("MIG-y", gi=1, ci=1, profile="3c.4g.40gb", sm=0.9 if on else 0.1, dram=0.95 if on else 0.5),
        )
        history.append(detector.step(sample(t, [gpu("GPU-2", instances=instances)]), attr))
    found = [f for f in history[-1] if f.resource == "dram"]
    assert found and found[0].domain == "gi/GPU-2/1" and found[0].culprit.key == "team-b/train"
    assert found[0].severity is Severity.WARNING  # SM activity is only a proxy for DRAM: report only
