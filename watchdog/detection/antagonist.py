"""Which neighbour degraded a victim: the second half of CPI², the search that runs only once a victim exists.

Pure (no I/O). CPI² (Zhang et al., EuroSys 2013) names the co-runner whose use correlates with the victim's
degradation. Correlation alone is not enough on a GPU, because the same rise in power can come from several
places: in the power domain a pod's use is weighed by its instance's share of the GPU (a 1g slice at 60 % draws
about a third of what a 3g slice at 60 % draws; MIG compute slices, NVIDIA MIG user guide, "Supported MIG
Profiles"), and when pods we may
not blame (the victim's own tenant, processes no pod owns) added more of that share than the best candidate did,
nobody is named: the evidence points elsewhere, and a wrongful eviction is worse than a missed one.

"Rose" is measured inside the correlation window (steady ticks against degraded ones) when the window holds enough
steady ticks, else against what the neighbour used on the victim's own baseline ticks (`Before`, kept by the
caller). The second sees a culprit that ramped up too slowly for the window to hold its "before", and one that
paused a few ticks and resumed, whose window holds too few steady ticks to be judged again. A neighbour whose use
moved with the victim's own on those baseline ticks is never named: they share a driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from watchdog.config.detection import InterferencePolicy
from watchdog.detection.domain_types import Domain, DomainKind
from watchdog.detection.rings import UNATTRIBUTED, SlotRing, pearson
from watchdog.model import EMPTY, PodRef



@dataclass(frozen=True, slots=True)
class Antagonist:
    ref: PodRef
    correlation: float
    rise: float  # mean use while the victim degraded − mean use while it was steady, relative to its own share
    weighted_rise: float  # the same in units of the domain (power: share of the GPU's compute)
    excluded_rise: float  # power: weighted rise of the pods that may not be named (0 elsewhere)


@dataclass(frozen=True, slots=True)
class Before:
    """The victim's reference levels, per pod key, from its baseline ticks (uncontended, victim active)."""

    use: Mapping[str, float] = field(default_factory=lambda: EMPTY)  # activity relative to the pod's own share
    load: Mapping[str, float] = field(default_factory=lambda: EMPTY)  # activity × share, and UNATTRIBUTED
    comovement: Mapping[str, float] = field(default_factory=lambda: EMPTY)  # correlation with the victim's own use


@dataclass(frozen=True, slots=True)
class Series:
    """The domain's aligned windows the search reads (see interference._DomainState)."""

    signal: SlotRing
    use: SlotRing
    load: SlotRing
    flag: SlotRing


def _mean(series: np.ndarray, mask: np.ndarray) -> float | None:
    values = series[mask & np.isfinite(series)]
    return float(values.mean()) if values.size else None


class _Rise:
    """Use while the victim degraded, over use before: in the window, and against the victim's baseline levels."""

    def __init__(self, *, steady: np.ndarray, degraded: np.ndarray, in_window: bool) -> None:
        self.steady, self.degraded, self.in_window = steady, degraded, in_window

    def __call__(self, series: np.ndarray, *, level: float | None) -> float | None:
        during = _mean(series, self.degraded)
        if during is None:
            return None
        # The window's own steady ticks when it holds enough of them (the nearest "before" there is); the
        # baseline level only when it does not, so a slow common drift is never measured from further back.
        before = _mean(series, self.steady) if self.in_window else level
        return None if before is None else during - before


def _own_use_rose(victim_use: np.ndarray, *, rise: _Rise, level: float | None, tolerance: float) -> bool:
    """Power: did the victim's own activity rise between before and during? Then its loss is partly its own doing.

    One-sided on purpose: on MIG the activity is GPM SM_UTIL, work done, which a cap shrinks with the clock (a 45 %
    clock loss takes up to 45 % of it) although the victim asked for the same, so a fall is what a victim of a deep
    cap looks like. A cap can only take work away, so a rise is the victim's own: beyond `tolerance`, or beyond
    `tolerance` × its level (0.1 → 0.3 is its own ramp, however small in absolute terms).
    """
    during = _mean(victim_use, rise.degraded)
    if during is None:
        return True
    levels = [] if level is None else [level]
    steady = _mean(victim_use, rise.steady) if rise.in_window else None
    if steady is not None:
        levels.append(steady)
    return any(during - lvl > min(tolerance, tolerance * lvl) for lvl in levels)


def find_antagonist(
    victim: str,
    *,
    domain: Domain,
    series: Series,
    before: Before,
    policy: InterferencePolicy,
    tenant_of: Callable[[PodRef], str],
) -> Antagonist | None:
    """The neighbour whose use rose while the victim was steady and tracks the victim's degradation, if any."""
    window = policy.correlation_window
    victim_signal = series.signal.window(victim, window)
    flags = series.flag.window(victim, window)
    # Was the victim working on its steady ticks? Its own use, which in an MPS domain is its SM activity (kept in the
    # load ring), not its DRAM share: a compute-bound client moves little over the memory bus and is still working.
    own = series.load if domain.kind is DomainKind.MPS else series.use
    victim_use = own.window(victim, window)
    with np.errstate(invalid="ignore"):
        steady = (flags == 0) & (victim_use >= policy.victim_min_activity)
    degraded = flags == 1
    in_window = int(steady.sum()) >= policy.min_steady_ticks
    # MPS: no falling back on the baseline levels. They date from before the bandwidth ran out, and a client that
    # kept working unflagged for long after a neighbour saturated the bus was not hurt by that neighbour's use: only
    # the window's own steady ticks say what "before" was (a victim's own drop long after the rise is not a squeeze).
    fallback = bool(before.use) and domain.kind is not DomainKind.MPS
    if not degraded.any() or not (in_window or fallback):
        return None
    rise = _Rise(steady=steady, degraded=degraded, in_window=in_window)
    power = domain.kind is DomainKind.POWER
    if power and _own_use_rose(victim_use, rise=rise, level=before.use.get(victim), tolerance=policy.steady_tolerance):
        return None

    def weighted(key: str) -> float:
        return rise(series.load.window(key, window), level=before.load.get(key)) or 0.0

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
        if before.comovement.get(ref.key, 0.0) >= policy.common_driver_correlation:
            continue  # it rose and fell with the victim while nothing was contended: a shared driver, not a cause
        use = series.use.window(ref.key, window)
        grew = rise(use, level=before.use.get(ref.key))
        if grew is None or grew < policy.min_antagonist_rise:
            continue
        correlation = pearson(use, victim_signal, min_points=policy.min_points)
        if correlation is None or correlation < policy.min_correlation:
            continue
        candidates.append(Antagonist(ref, correlation, grew, weighted(ref.key) if power else grew, 0.0))
    if not candidates:
        return None
    if not power:
        return max(candidates, key=lambda c: (c.correlation, c.rise))
    best = max(candidates, key=lambda c: (c.weighted_rise, c.correlation))
    if excluded > best.weighted_rise:
        return None  # the victim's own tenant or unowned processes explain more of the draw than the candidate
    return Antagonist(best.ref, best.correlation, best.rise, best.weighted_rise, excluded)
