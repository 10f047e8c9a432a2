"""Time-sliced victims whatever the scheduler: shares that follow demand (MPS) squeeze a pod below its fair level.

The detector learns the scheduler at the tick contention begins (detection/scheduler_model.py); these tests drive
it with shares computed the way each scheduler hands them out, as the simulator does.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from detection_builders import Noise, attribution, gpu, pod, proc, sample

from watchdog.config.detection import InterferencePolicy
from watchdog.detection import Detector
from watchdog.detection.domains import DomainKind
from watchdog.detection.scheduler_model import SchedulerEvidence
from watchdog.model import FindingKind, NodeSample


def proportional(demand_a: float, demand_b: float) -> tuple[float, float]:
    total = demand_a + demand_b
    return (demand_a, demand_b) if total <= 1.0 else (demand_a / total, demand_b / total)


def timesliced(tick: int, *, a: float, b: float) -> NodeSample:
    processes = (proc(100, sm=a, mem=1 << 30), proc(200, sm=b, mem=1 << 30))
    return sample(tick, [gpu("GPU-1", processes=processes, gpu_util=min(1.0, a + b))])


@pytest.fixture
def serve_fill():
    serve, fill = pod("prod", "serve", priority=50000), pod("batch", "fill", priority=10)
    return attribution(devices={"GPU-1": [serve, fill]}, processes={100: serve, 200: fill})


def run(serve_fill, demands) -> list[list]:
    detector, noise = Detector(), Noise(seed=41)
    found = []
    for t, (a, b) in enumerate(demands):
        shares = proportional(a, b)
        findings = detector.step(timesliced(t, a=noise(shares[0], 0.01), b=noise(shares[1], 0.01)), serve_fill)
        found.append([f for f in findings if f.kind is FindingKind.INTERFERENCE])
    return found


def test_a_greedy_neighbour_squeezing_a_pod_below_its_fair_level_is_found(serve_fill):
    """serve asks 0.4 (under its 0.5 fair level); fill turns greedy at 50: serve gets 0.4 / 1.4."""
    found = run(serve_fill, [(0.4, 1.0 if t >= 50 else 0.1) for t in range(120)])
    assert not any(found[:50])
    [f] = found[-1]
    assert f.culprit.key == "batch/fill" and [v.key for v in f.victims] == ["prod/serve"]
    assert f.evidence["scheduler"] == "proportional" and f.evidence["fair_share"] == pytest.approx(0.5, abs=0.05)


def test_trap_own_drop_while_the_gpu_keeps_idle_time_is_never_found(serve_fill):
    """A burst at 30 shows the shares follow demand; at 100 serve's demand falls as fill's rises, to a total of 0.9."""
    demands = [(0.6 if t < 100 else 0.2, 1.0 if 30 <= t < 32 else 0.25 if t < 100 else 0.7) for t in range(200)]
    assert not any(run(serve_fill, demands))


def domain(busy: float, **activity: float) -> SimpleNamespace:
    return SimpleNamespace(kind=DomainKind.TIMESLICE, busy=busy, activity=activity)


def vote(before: SimpleNamespace, after: SimpleNamespace, fair: dict[str, float], *, gap: int = 1) -> SchedulerEvidence:
    evidence, policy = SchedulerEvidence(), InterferencePolicy()  # tolerance 0.02, drop 0.05, activity 0.1
    evidence.observe(before, {}, policy=policy, tick=10)
    evidence.observe(after, fair, policy=policy, tick=10 + gap)
    return evidence


def test_the_onset_of_contention_tells_the_schedulers_apart():
    idle = domain(0.5, a=0.4, b=0.1)
    # max-min fair: a keeps its 0.4 while b takes the rest; proportional: a loses a share at once
    assert not vote(idle, domain(1.0, a=0.4, b=0.6), {"a": 0.5, "b": 0.6}).proportional
    assert vote(idle, domain(1.0, a=0.29, b=0.71), {"a": 0.5, "b": 0.71}).proportional
    # a pod above its level: held at it (max-min) or pushed below it (proportional)
    above = domain(0.85, a=0.75, b=0.1)
    assert not vote(above, domain(1.0, a=0.5, b=0.5), {"a": 0.5, "b": 0.5}).proportional
    assert vote(above, domain(1.0, a=0.43, b=0.57), {"a": 0.5, "b": 0.57}).proportional


def test_no_verdict_without_a_clean_onset():
    idle, squeezed, fair = domain(0.5, a=0.4, b=0.1), domain(1.0, a=0.29, b=0.71), {"a": 0.5, "b": 0.71}
    assert not vote(idle, squeezed, fair, gap=3).proportional  # ticks missing between: no onset seen
    assert not vote(domain(0.97, a=0.4, b=0.57), squeezed, fair).proportional  # no idle time the tick before
    # the pod that rose and saturated the GPU says nothing; a squeezed one and a kept one cancel out
    assert not vote(domain(0.5, a=0.3, b=0.2), domain(1.0, a=0.6, b=0.4), {"a": 0.6, "b": 0.5}).proportional
    mixed = vote(domain(0.6, a=0.3, b=0.2, c=0.1), domain(1.0, a=0.2, b=0.2, c=0.6), {"a": 0.4, "b": 0.4, "c": 0.6})
    assert not mixed.proportional and mixed.voted_tick is None
