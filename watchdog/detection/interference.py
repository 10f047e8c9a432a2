"""Cross-tenant interference, CPI²-style: first a victim that left its own baseline, then an antagonist by correlation.

Pure (no I/O, no asyncio). CPI² (Zhang et al., EuroSys 2013) flags a task whose CPI is an outlier against its own
history several times in a short window, and only then looks for the co-runner whose CPU use correlates with the
victim's degradation. We keep that order because it is what makes the detector precise: a neighbour that is merely
busy is never a culprit unless somebody measurably suffers, and a sufferer without a correlated neighbour is left
alone (its own load, the weather, a driver hiccup). The victim signals per domain and the traps they avoid are
explained in docs/detection.md; the per-tick state lives in `rings`, the signals in `signals`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from watchdog.config.detection import DetectionPolicy
from watchdog.detection.domains import Domain, DomainKind
from watchdog.detection.rings import Baseline, SlotRing, pearson
from watchdog.detection.signals import Signal, contended, victim_signal
from watchdog.model import Attribution, Finding, FindingKind, PodRef, Severity


@dataclass(slots=True)
class _Episode:
    """A victim latched to its antagonist: stays open while the victim keeps suffering and the antagonist is busy."""

    culprit: PodRef
    first_tick: int
    since: float
    correlation: float
    rise: float


@dataclass(slots=True)
class _PodState:
    baseline: Baseline
    source: str
    flags: int = 0  # outlier bits of the last M observed ticks, newest in bit 0
    last_seen: int = 0
    own_drop_tick: int | None = None  # when its signal left the baseline while the device had idle capacity
    z_score: float = 0.0
    deviation: float = 0.0
    episode: _Episode | None = None


@dataclass(slots=True)
class _DomainState:
    signal: SlotRing
    use: SlotRing
    flag: SlotRing
    domain: Domain
    last_tick: int
    pods: dict[str, _PodState] = field(default_factory=dict)


class InterferenceDetector:
    """Per-domain baselines, outlier flags and antagonist search; one finding per (domain, antagonist)."""

    def __init__(self, policy: DetectionPolicy, *, tenant_of: Callable[[PodRef], str]) -> None:
        self._policy = policy
        self._tenant_of = tenant_of
        self._domains: dict[str, _DomainState] = {}

    def set_policy(self, policy: DetectionPolicy) -> None:
        """Keep baselines and windows; resize the windows, and reset baselines whose signal source changed."""
        capacity = self._capacity(policy)
        if capacity != self._capacity(self._policy):
            for state in self._domains.values():
                state.signal = state.signal.resized(capacity)
                state.use = state.use.resized(capacity)
                state.flag = state.flag.resized(capacity)
        mask = (1 << policy.interference.flags_window) - 1
        for state in self._domains.values():
            for pod in state.pods.values():
                pod.flags &= mask
        self._policy = policy  # a pod whose override appeared/vanished gets a fresh baseline at its next tick

    @staticmethod
    def _capacity(policy: DetectionPolicy) -> int:
        p = policy.interference
        return max(p.correlation_window, p.flags_window)

    def step(
        self,
        domains: list[Domain],
        attribution: Attribution,
        *,
        tick: int,
        timestamp: float,
        external: Mapping[str, float],
    ) -> list[Finding]:
        policy = self._policy.interference
        if not policy.enabled:
            self._domains.clear()
            return []
        for domain in domains:
            busy = contended(domain, policy)
            if busy is None:
                continue  # the numbers that say whether it is contended are missing: skip, never assume
            state = self._domains.get(domain.key)
            if state is None:
                capacity = self._capacity(self._policy)
                state = self._domains[domain.key] = _DomainState(
                    SlotRing(capacity), SlotRing(capacity), SlotRing(capacity), domain, tick
                )
            state.domain, state.last_tick = domain, tick
            self._observe(state, busy=busy, tick=tick, external=external)
            self._attribute(state, tick=tick, timestamp=timestamp)
        self._forget_stale(tick)
        return self._findings(attribution)

    # ---------------------------------------------------------------------------------------------- per tick

    def _observe(self, state: _DomainState, *, busy: bool, tick: int, external: Mapping[str, float]) -> None:
        policy = self._policy.interference
        mask = (1 << policy.flags_window) - 1
        for ring in (state.signal, state.use, state.flag):
            ring.advance()
        domain = state.domain
        overrides = self._policy.victim_signal_overrides
        for ref in domain.pods:
            key = ref.key
            activity = domain.activity.get(key)
            override = overrides.get(self._tenant_of(ref)) if overrides else None
            signal = victim_signal(domain, activity, override=override, external=external.get(key))
            pod = state.pods.get(key)
            if pod is None or pod.source != signal.source:
                pod = state.pods[key] = _PodState(Baseline(), signal.source)
            pod.last_seen = tick
            state.use.set(key, activity)
            active = activity is not None and activity >= policy.victim_min_activity
            outlier = False
            if signal.value is not None:
                state.signal.set(key, signal.value)
                outlier = self._judge(pod, signal, domain=domain, busy=busy, active=active, tick=tick)
            pod.flags = ((pod.flags << 1) | int(outlier)) & mask
            state.flag.set(key, 1.0 if outlier else 0.0)

    def _judge(self, pod: _PodState, signal: Signal, *, domain: Domain, busy: bool, active: bool, tick: int) -> bool:
        """Is this tick an outlier for the pod? Learns the baseline on unhindered active ticks instead."""
        policy = self._policy.interference
        base = pod.baseline
        value = signal.value
        assert value is not None
        deviation = value - base.mean
        floor = signal.min_deviation if signal.min_deviation is not None else policy.min_deviation
        floor = max(floor, signal.min_relative_deviation * abs(base.mean))
        beyond = base.count > 0 and deviation > max(policy.k_sigma * base.std, floor)
        beyond = beyond or (signal.threshold is not None and value >= signal.threshold)
        if not active:
            return False
        if not busy:
            if beyond and domain.kind is not DomainKind.POWER and signal.source == "nvml":
                # The share fell while the device had idle capacity: the pod's own demand dropped, not a neighbour.
                pod.own_drop_tick = tick
            base.update(value, alpha=policy.baseline_alpha)
            return False
        if base.count < policy.baseline_min_ticks:
            return False  # never saw it unhindered long enough: no baseline, no victim (e.g. synchronised starts)
        if pod.own_drop_tick is not None and tick - pod.own_drop_tick <= policy.correlation_window:
            return False
        pod.deviation = deviation
        pod.z_score = deviation / base.std if base.std > 0 else float("inf") if deviation > 0 else 0.0
        return beyond

    def _attribute(self, state: _DomainState, *, tick: int, timestamp: float) -> None:
        policy = self._policy.interference
        activity = state.domain.activity
        for key, pod in state.pods.items():
            if pod.last_seen != tick:
                continue
            count = pod.flags.bit_count()
            episode = pod.episode
            if episode is not None:
                use = activity.get(episode.culprit.key)
                gone = episode.culprit.key not in activity
                if gone or count < policy.clear_flags or (use is not None and use < policy.min_antagonist_use / 2):
                    pod.episode = None
                continue
            if count >= policy.flags_needed and pod.flags & 1:
                found = self._antagonist(state, key)
                if found is not None:
                    culprit, correlation, rise = found
                    pod.episode = _Episode(culprit, tick, timestamp, correlation, rise)

    def _antagonist(self, state: _DomainState, victim: str) -> tuple[PodRef, float, float] | None:
        """The neighbour whose use rose while the victim was steady and tracks the victim's degradation."""
        policy = self._policy.interference
        window = policy.correlation_window
        signal = state.signal.window(victim, window)
        flags = state.flag.window(victim, window)
        victim_use = state.use.window(victim, window)
        with np.errstate(invalid="ignore"):
            steady = (flags == 0) & (victim_use >= policy.victim_min_activity)
        degraded = flags == 1
        if int(steady.sum()) < policy.min_steady_ticks or not degraded.any():
            return None
        if state.domain.kind is DomainKind.POWER:
            # Power weights clock loss by the victim's own activity: if that activity itself rose with the
            # neighbour's (two jobs started together), the "degradation" is partly its own doing.
            if abs(float(victim_use[degraded].mean()) - float(victim_use[steady].mean())) > policy.steady_tolerance:
                return None
        victim_tenant = self._tenant_of(next(r for r in state.domain.pods if r.key == victim))
        best: tuple[PodRef, float, float] | None = None
        for ref in state.domain.pods:
            now = state.domain.activity.get(ref.key)
            if ref.key == victim or now is None or now < policy.min_antagonist_use:
                continue
            if policy.cross_tenant_only and self._tenant_of(ref) == victim_tenant:
                continue
            use = state.use.window(ref.key, window)
            before, during = use[steady & np.isfinite(use)], use[degraded & np.isfinite(use)]
            if not before.size or not during.size:
                continue
            rise = float(during.mean() - before.mean())
            if rise < policy.min_antagonist_rise:
                continue
            correlation = pearson(use, signal, min_points=policy.min_points)
            if correlation is None or correlation < policy.min_correlation:
                continue
            if best is None or (correlation, rise) > (best[1], best[2]):
                best = (ref, correlation, rise)
        return best

    def _forget_stale(self, tick: int) -> None:
        stale = self._policy.interference.stale_ticks
        for key, state in list(self._domains.items()):
            if tick - state.last_tick > stale:
                del self._domains[key]
                continue
            for pod_key, pod in list(state.pods.items()):
                if tick - pod.last_seen > stale:
                    del state.pods[pod_key]
                    for ring in (state.signal, state.use, state.flag):
                        ring.forget(pod_key)

    # -------------------------------------------------------------------------------------------- findings

    def _findings(self, attribution: Attribution) -> list[Finding]:
        policy = self._policy.interference
        findings: list[Finding] = []
        for state in self._domains.values():
            groups: dict[str, list[tuple[str, _PodState]]] = {}
            for key, pod in state.pods.items():
                if pod.episode is not None:
                    groups.setdefault(pod.episode.culprit.key, []).append((key, pod))
            domain = state.domain
            for culprit_key, victims in sorted(groups.items()):
                worst_key, worst = max(victims, key=lambda item: item[1].deviation)
                episode = worst.episode
                assert episode is not None
                culprit = episode.culprit
                info = attribution.pod(culprit)
                refs = {ref.key: ref for ref in domain.pods}
                victim_refs = tuple(refs[k] for k, _ in victims if k in refs)
                evidence: dict[str, float | int | str] = {
                    "z_score": round(min(worst.z_score, 1e6), 3),
                    "deviation": round(worst.deviation, 4),
                    "baseline_mean": round(worst.baseline.mean, 4),
                    "baseline_std": round(worst.baseline.std, 4),
                    "correlation": round(episode.correlation, 3),
                    "antagonist_rise": round(episode.rise, 3),
                    "window": policy.correlation_window,
                    "flags": worst.flags.bit_count(),
                    "flags_window": policy.flags_window,
                    "signal": worst.source,
                    "victim": worst_key,
                }
                if domain.activity.get(culprit_key) is not None:
                    evidence["antagonist_use"] = round(float(domain.activity[culprit_key]), 4)
                if domain.clock_loss is not None:
                    evidence["clock_loss"] = round(domain.clock_loss, 4)
                if domain.busy is not None:
                    evidence["busy"] = round(domain.busy, 4)
                if info is not None:
                    evidence["culprit_priority"] = info.priority
                usage = {
                    key: round(float(act) * domain.share.get(key, 1.0), 4)
                    for key, act in domain.activity.items()
                    if act is not None
                }
                first = min(victims, key=lambda item: item[1].episode.first_tick)[1].episode  # type: ignore[union-attr]
                findings.append(
                    Finding(
                        kind=FindingKind.INTERFERENCE,
                        key=f"interference/{domain.key}/{culprit_key}",
                        domain=domain.key,
                        resource=domain.resource,
                        severity=Severity.CRITICAL,
                        first_tick=first.first_tick,
                        last_tick=state.last_tick,
                        since=first.since,
                        victims=victim_refs,
                        culprit=refs.get(culprit_key, culprit),
                        tenant=self._tenant_of(culprit),
                        evidence=evidence,
                        usage=usage,
                        message=(
                            f"{culprit_key} degrades {', '.join(r.key for r in victim_refs)} on {domain.key} "
                            f"({domain.resource}, r={episode.correlation:.2f})"
                        ),
                    )
                )
        return findings
