"""Which neighbour degraded a victim: the second half of CPI², the search that runs only once a victim exists.

Pure (no I/O). CPI² (Zhang et al., EuroSys 2013) names the co-runner whose use correlates with the victim's
degradation. Correlation alone is not enough on a GPU, because the same rise in power can come from several
places: in the power domain a pod's use is weighed by its instance's share of the GPU (a 1g slice at 60 % draws
about a third of what a 3g slice at 60 % draws; MIG compute slices, reference nvml.md §9), and when pods we may
not blame (the victim's own tenant, processes no pod owns) added more of that share than the best candidate did,
nobody is named: the evidence points elsewhere, and a wrongful eviction is worse than a missed one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from watchdog.config.detection import InterferencePolicy
from watchdog.detection.domains import Domain, DomainKind
from watchdog.detection.rings import SlotRing, pearson
from watchdog.model import PodRef

UNATTRIBUTED = "\x00unattributed"  # ring member for the use of processes no known pod owns


@dataclass(frozen=True, slots=True)
class Antagonist:
    ref: PodRef
    correlation: float
    rise: float  # mean use while the victim degraded − mean use while it was steady, relative to its own share
    weighted_rise: float  # the same in units of the domain (power: share of the GPU's compute)
    excluded_rise: float  # power: weighted rise of the pods that may not be named (0 elsewhere)


def _rise(series: np.ndarray, *, steady: np.ndarray, degraded: np.ndarray) -> float | None:
    present = np.isfinite(series)
    before, during = series[steady & present], series[degraded & present]
    if not before.size or not during.size:
        return None
    return float(during.mean() - before.mean())


def find_antagonist(
    victim: str,
    *,
    domain: Domain,
    signal: SlotRing,
    use: SlotRing,
    load: SlotRing,
    flag: SlotRing,
    policy: InterferencePolicy,
    tenant_of: Callable[[PodRef], str],
) -> Antagonist | None:
    """The neighbour whose use rose while the victim was steady and tracks the victim's degradation, if any."""
    window = policy.correlation_window
    victim_signal = signal.window(victim, window)
    flags = flag.window(victim, window)
    victim_use = use.window(victim, window)
    with np.errstate(invalid="ignore"):
        steady = (flags == 0) & (victim_use >= policy.victim_min_activity)
    degraded = flags == 1
    if int(steady.sum()) < policy.min_steady_ticks or not degraded.any():
        return None
    power = domain.kind is DomainKind.POWER
    if power:
        # Power weights clock loss by the victim's own activity: if that activity itself rose with the
        # neighbour's (two jobs started together), the "degradation" is partly its own doing. A cap can only take
        # work away, so a rise counts against the victim relative to its steady level (0.1 → 0.3 is its own ramp).
        level = float(victim_use[steady].mean())
        change = float(victim_use[degraded].mean()) - level
        if abs(change) > policy.steady_tolerance or change > policy.steady_tolerance * level:
            return None

    def weighted(key: str) -> float:
        return _rise(load.window(key, window), steady=steady, degraded=degraded) or 0.0

    victim_tenant = tenant_of(next(ref for ref in domain.pods if ref.key == victim))
    excluded = max(0.0, weighted(UNATTRIBUTED)) + max(0.0, weighted(victim)) if power else 0.0
    candidates: list[Antagonist] = []
    for ref in domain.pods:
        if ref.key == victim:
            continue
        if policy.cross_tenant_only and tenant_of(ref) == victim_tenant:
            if power:
                excluded += max(0.0, weighted(ref.key))
            continue
        now = domain.activity.get(ref.key)
        if now is None or now < policy.min_antagonist_use:
            continue
        series = use.window(ref.key, window)
        rise = _rise(series, steady=steady, degraded=degraded)
        if rise is None or rise < policy.min_antagonist_rise:
            continue
        correlation = pearson(series, victim_signal, min_points=policy.min_points)
        if correlation is None or correlation < policy.min_correlation:
            continue
        candidates.append(Antagonist(ref, correlation, rise, weighted(ref.key) if power else rise, 0.0))
    if not candidates:
        return None
    if not power:
        return max(candidates, key=lambda c: (c.correlation, c.rise))
    best = max(candidates, key=lambda c: (c.weighted_rise, c.correlation))
    if excluded > best.weighted_rise:
        return None  # the victim's own tenant or unowned processes explain more of the draw than the candidate
    return Antagonist(best.ref, best.correlation, best.rise, best.weighted_rise, excluded)
