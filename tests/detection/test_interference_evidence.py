"""An interference finding's z-score says when it measures nothing: a baseline that never moved (σ = 0), as the
power domain's clock loss is before a power cap first bites."""

from __future__ import annotations

from detection_builders import MAX_CLOCK, SW_POWER_CAP, Noise, attribution, gpu, mig, proc, sample

from watchdog.detection import Detector
from watchdog.evaluation.report_text import z_score_text
from watchdog.model import FindingKind, NodeSample

ONSET = 40


def power_sample(tick: int, *, victim: float, antagonist: float) -> NodeSample:
    """One MIG GPU: the victim on a 3g instance, the antagonist on a 1g; the power cap bites from ONSET on."""
    loss = 0.25 if tick >= ONSET else 0.0
    instances = (mig("MIG-a", gi=1, profile="3g.40gb", sm=victim), mig("MIG-b", gi=2, sm=antagonist))
    return sample(tick, [gpu("GPU-0", instances=instances, clock=MAX_CLOCK * (1 - loss),
                             reasons=SW_POWER_CAP if loss else 0)])


def timeslice_sample(tick: int, *, victim: float, antagonist: float) -> NodeSample:
    """One time-sliced GPU: the victim held at its fair share once the antagonist wants more, from ONSET on."""
    processes = (proc(100, sm=victim, mem=1 << 30), proc(200, sm=antagonist, mem=1 << 30))
    return sample(tick, [gpu("GPU-1", processes=processes, gpu_util=min(1.0, victim + antagonist))])


def last_evidence(detector: Detector, samples, attr) -> dict:
    found = [f for s in samples for f in detector.step(s, attr) if f.kind is FindingKind.INTERFERENCE]
    assert found
    return dict(found[-1].evidence)


def test_a_flat_baseline_caps_the_z_score_and_says_so(detector, victim_pod, antagonist_pod) -> None:
    noise = Noise()
    samples = [power_sample(t, victim=noise(0.8, 0.02), antagonist=noise(1.0 if t >= ONSET else 0.05, 0.02))
               for t in range(70)]
    flat = last_evidence(detector, samples, attribution(devices={"MIG-a": [victim_pod], "MIG-b": [antagonist_pod]}))
    assert flat["baseline_std"] == 0 and flat["z_score"] == 1e6 and flat["z_score_capped"] is True
    assert flat["deviation"] > 0  # the size of the drop is still there
    assert z_score_text(flat) == "baseline flat (σ = 0)"


def test_a_baseline_with_spread_gives_a_plain_z_score(detector, victim_pod, antagonist_pod) -> None:
    noise = Noise()
    samples = []
    for t in range(70):
        victim, antagonist = (0.5, 0.5) if t >= ONSET else (0.6, 0.2)
        samples.append(timeslice_sample(t, victim=noise(victim, 0.015), antagonist=noise(antagonist, 0.015)))
    attr = attribution(devices={"GPU-1": [victim_pod, antagonist_pod]}, processes={100: victim_pod,
                                                                                   200: antagonist_pod})
    noisy = last_evidence(detector, samples, attr)
    assert noisy["baseline_std"] > 0 and "z_score_capped" not in noisy and 3 < noisy["z_score"] < 1e6
    assert z_score_text(noisy) == f"z {noisy['z_score']:g}"
