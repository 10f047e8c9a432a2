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

from watchdog.config.detection import DetectionPolicy
from watchdog.detection.antagonist import UNATTRIBUTED, find_antagonist
from watchdog.detection.domains import Domain, DomainKind
from watchdog.detection.rings import Baseline, SlotRing
from watchdog.detection.signals import Signal, contended, fair_levels, victim_signal
from watchdog.model import Attribution, Finding, FindingKind, PodRef, Severity


@dataclass(slots=True)
class _Episode:
    """A victim latched to its antagonist: stays open while the victim keeps suffering and the antagonist is busy."""

    culprit: PodRef
    first_tick: int
    since: float
    correlation: float
    rise: float
    last_observed: int  # last tick both the victim's signal and the culprit's use were read
    excluded_rise: float = 0.0  # power: GPU share the victim's tenant and unowned processes added meanwhile


@dataclass(slots=True)
class _PodState:
    baseline: Baseline
    source: str
    flags: int = 0  # outlier bits of the last M observed ticks, newest in bit 0
    last_seen: int = 0
    signal_tick: int | None = None  # last tick its signal had a value
    fair: float | None = None  # its water-filling fair share at the last judged tick (time-sliced / gi)
    own_drop_tick: int | None = None  # when its signal left the baseline while the device had idle capacity
    z_score: float = 0.0
    deviation: float = 0.0
    episode: _Episode | None = None


@dataclass(slots=True)
class _DomainState:
    signal: SlotRing
    use: SlotRing  # activity relative to the pod's own share
    load: SlotRing  # activity × share: the part of the domain it drives (power: GPU fraction), + unattributed
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
                state.load = state.load.resized(capacity)
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
                    SlotRing(capacity), SlotRing(capacity), SlotRing(capacity), SlotRing(capacity), domain, tick
                )
            state.domain, state.last_tick = domain, tick
            self._observe(state, busy=busy, tick=tick, external=external)
            self._attribute(state, tick=tick, timestamp=timestamp)
        self._forget_stale(tick)
        return self._findings(attribution, tick=tick)

    # ---------------------------------------------------------------------------------------------- per tick

    def _observe(self, state: _DomainState, *, busy: bool, tick: int, external: Mapping[str, float]) -> None:
        policy = self._policy.interference
        mask = (1 << policy.flags_window) - 1
        for ring in (state.signal, state.use, state.load, state.flag):
            ring.advance()
        domain = state.domain
        state.load.set(UNATTRIBUTED, domain.unattributed)
        fair = fair_levels(domain)
        overrides = self._policy.victim_signal_overrides
        for ref in domain.pods:
            key = ref.key
            activity = domain.activity.get(key)
            override = overrides.get(self._tenant_of(ref)) if overrides else None
            signal = victim_signal(domain, activity, override=override, external=external.get(key))
            pod = state.pods.get(key)
            if pod is None or pod.source != signal.source:
                pod = state.pods[key] = _PodState(Baseline(), signal.source)
            pod.last_seen, pod.fair = tick, fair.get(key)
            state.use.set(key, activity)
            state.load.set(key, None if activity is None else activity * domain.share.get(key, 1.0))
            active = activity is not None and activity >= policy.victim_min_activity
            outlier = False
            if signal.value is not None:
                pod.signal_tick = tick
                state.signal.set(key, signal.value)
                at_fair = pod.fair is not None and activity is not None
                at_fair = at_fair and activity >= pod.fair - policy.fair_share_tolerance  # type: ignore[operator]
                outlier = self._judge(
                    pod, signal, domain=domain, busy=busy, active=active, at_fair_share=at_fair, tick=tick
                )
            pod.flags = ((pod.flags << 1) | int(outlier)) & mask
            state.flag.set(key, 1.0 if outlier else 0.0)

    def _judge(
        self,
        pod: _PodState,
        signal: Signal,
        *,
        domain: Domain,
        busy: bool,
        active: bool,
        at_fair_share: bool,
        tick: int,
    ) -> bool:
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
        if domain.kind is DomainKind.TIMESLICE and signal.source == "nvml" and not at_fair_share:
            # Below its fair level, max-min fairness (water-filling) has given the pod all it asked for: whatever
            # its share lost, it was its own demand, not a neighbour. Only a pod held AT the level can be starved.
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
                elif pod.signal_tick == tick and use is not None:
                    episode.last_observed = tick  # fresh evidence: both sides were read this tick
                continue
            if count >= policy.flags_needed and pod.flags & 1:
                found = find_antagonist(
                    key,
                    domain=state.domain,
                    signal=state.signal,
                    use=state.use,
                    load=state.load,
                    flag=state.flag,
                    policy=policy,
                    tenant_of=self._tenant_of,
                )
                if found is not None:
                    pod.episode = _Episode(
                        found.ref, tick, timestamp, found.correlation, found.rise, tick, found.excluded_rise
                    )

    def _forget_stale(self, tick: int) -> None:
        stale = self._policy.interference.stale_ticks
        for key, state in list(self._domains.items()):
            if tick - state.last_tick > stale:
                del self._domains[key]
                continue
            for pod_key, pod in list(state.pods.items()):
                if tick - pod.last_seen > stale:
                    del state.pods[pod_key]
                    for ring in (state.signal, state.use, state.load, state.flag):
                        ring.forget(pod_key)

    # -------------------------------------------------------------------------------------------- findings

    def _findings(self, attribution: Attribution, *, tick: int) -> list[Finding]:
        findings: list[Finding] = []
        for state in self._domains.values():
            groups: dict[str, list[tuple[str, _PodState]]] = {}
            for key, pod in state.pods.items():
                if pod.episode is not None:
                    groups.setdefault(pod.episode.culprit.key, []).append((key, pod))
            for culprit_key, victims in sorted(groups.items()):
                findings.append(self._finding(state, culprit_key, victims, attribution, tick=tick))
        return findings

    def _finding(
        self,
        state: _DomainState,
        culprit_key: str,
        victims: list[tuple[str, _PodState]],
        attribution: Attribution,
        *,
        tick: int,
    ) -> Finding:
        policy = self._policy.interference
        domain = state.domain
        worst_key, worst = max(victims, key=lambda item: item[1].deviation)
        episode = worst.episode
        assert episode is not None
        culprit = episode.culprit
        info = attribution.pod(culprit)
        refs = {ref.key: ref for ref in domain.pods}
        victim_refs = tuple(refs[k] for k, _ in victims if k in refs)
        episodes = [pod.episode for _, pod in victims if pod.episode is not None]
        first = min(episodes, key=lambda e: e.first_tick)
        last_observed = max(e.last_observed for e in episodes)
        # Only the clock loss of the power domain is measured damage. A share that fell on a time-sliced GPU or a
        # GPU instance may be the pod's own demand falling (NVML cannot see unmet demand), so those findings are
        # report-only unless the victim's tenant supplied its own signal (docs/detection.md, "Severity").
        overridden = any(pod.source == "override" for _, pod in victims)
        # The GPU-instance domain judges DRAM by an SM-activity proxy (GPM gives DRAM per GI only): report-only
        # unless the tenant's own signal says it suffers. Power and time-slicing rest on direct NVML evidence.
        critical = domain.kind is not DomainKind.GPU_INSTANCE or overridden
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
            "signal": "override" if overridden else worst.source,
            "victim": worst_key,
        }
        if domain.activity.get(culprit_key) is not None:
            evidence["antagonist_use"] = round(float(domain.activity[culprit_key]), 4)
        if domain.kind is DomainKind.POWER:
            evidence["excluded_rise"] = round(episode.excluded_rise, 4)
        if worst.fair is not None:
            evidence["fair_share"] = round(worst.fair, 4)
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
        return Finding(
            kind=FindingKind.INTERFERENCE,
            key=f"interference/{domain.key}/{culprit_key}",
            domain=domain.key,
            resource=domain.resource,
            severity=Severity.CRITICAL if critical else Severity.WARNING,
            first_tick=first.first_tick,
            last_tick=last_observed,
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
            observed=last_observed == tick,
        )
