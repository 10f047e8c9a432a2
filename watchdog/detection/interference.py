"""Cross-tenant interference, CPI²-style: first a victim that left its own baseline, then an antagonist by correlation.

Pure (no I/O, no asyncio). CPI² (Zhang et al., EuroSys 2013) flags a task whose CPI is an outlier against its own
history several times in a short window, and only then looks for the co-runner whose CPU use correlates with the
victim's degradation. We keep that order because it is what makes the detector precise: a neighbour that is merely
busy is never a culprit unless somebody measurably suffers, and a sufferer without a correlated neighbour is left
alone (its own load, the weather, a driver hiccup) — unless nobody's use could be read at all (an A100 in MIG
mode has no GPM): then it is reported with culprit unknown (`blind`), never dropped and never blamed on a guess.
The victim signals per domain and the traps they avoid are explained in docs/detection.md; the per-tick state
lives in `rings`, the signals in `signals`.
"""

from __future__ import annotations

from typing import Callable, Mapping

from watchdog.config.detection import DetectionPolicy
from watchdog.detection.antagonist import UNATTRIBUTED, Before, find_antagonist
from watchdog.detection.blind import BlindEpisode, blind_to_neighbours, culprit_unknown_finding
from watchdog.detection.domains import Domain, DomainKind
from watchdog.detection.episodes import ClosedEpisode, DomainState, Episode, PodState
from watchdog.detection.rings import Baseline, SlotRing
from watchdog.detection.victim_signals import Signal, contended, fair_levels, victim_signal
from watchdog.model import Attribution, Finding, FindingKind, PodRef, Severity


class InterferenceDetector:
    """Per-domain baselines, outlier flags and antagonist search; one finding per (domain, antagonist)."""

    def __init__(self, policy: DetectionPolicy, *, tenant_of: Callable[[PodRef], str]) -> None:
        self._policy = policy
        self._tenant_of = tenant_of
        self._domains: dict[str, DomainState] = {}

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
        low_mask = (1 << policy.interference.release_window) - 1
        for state in self._domains.values():
            for pod in state.pods.values():
                pod.flags &= mask
                if pod.episode is not None:
                    pod.episode.low &= low_mask
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
                rings = [SlotRing(capacity) for _ in range(4)]
                state = self._domains[domain.key] = DomainState(*rings, domain=domain, last_tick=tick)
            state.domain, state.last_tick, state.busy = domain, tick, busy
            self._observe(state, busy=busy, tick=tick, external=external)
            self._attribute(state, tick=tick, timestamp=timestamp)
        self._forget_stale(tick)
        return self._findings(attribution, tick=tick)

    # ---------------------------------------------------------------------------------------------- per tick

    def _observe(self, state: DomainState, *, busy: bool, tick: int, external: Mapping[str, float]) -> None:
        policy = self._policy.interference
        mask = (1 << policy.flags_window) - 1
        for ring in state.rings:
            ring.advance()
        domain = state.domain
        state.load.set(UNATTRIBUTED, domain.unattributed)
        fair = fair_levels(domain)
        # Below its fair level a pod can be starved only by a scheduler whose shares follow demand, and only while
        # the GPU has no idle time left (detection/scheduler_model.py).
        timesliced = domain.kind is DomainKind.TIMESLICE
        squeezable = timesliced and state.scheduler.observe(domain, fair, policy=policy, tick=tick)
        overrides = self._policy.victim_signal_overrides
        own_activity = domain.victim_activity
        for ref in domain.pods:
            key = ref.key
            activity = domain.activity.get(key)
            own = activity if own_activity is None else own_activity.get(key)  # pcie: SM activity, not link use
            override = overrides.get(self._tenant_of(ref)) if overrides else None
            signal = victim_signal(domain, own, override=override, external=external.get(key))
            pod = state.pods.get(key)
            if pod is None or pod.source != signal.source:
                pod = state.pods[key] = PodState(Baseline(), signal.source)
            pod.last_seen, pod.fair = tick, fair.get(key)
            state.use.set(key, activity)
            state.load.set(key, None if activity is None else activity * domain.share.get(key, 1.0))
            # A tenant's own signal speaks for itself where the pod's use is unknown (an A100 MIG instance has no
            # GPM): it is the tenant's measure of the service it gets, not of the work it does.
            active = (own >= policy.victim_min_activity) if own is not None else signal.source == "override"
            outlier = False
            if signal.value is not None:
                pod.signal_tick = tick
                state.signal.set(key, signal.value)
                at_fair = pod.fair is not None and activity is not None
                at_fair = at_fair and activity >= pod.fair - policy.fair_share_tolerance  # type: ignore[operator]
                at_fair = at_fair or squeezable
                outlier = self._judge(
                    pod, signal, domain=domain, busy=busy, active=active, at_fair_share=at_fair, tick=tick
                )
            pod.flags = ((pod.flags << 1) | int(outlier)) & mask
            state.flag.set(key, 1.0 if outlier else 0.0)
        self._learn_levels(state, tick=tick)

    def _learn_levels(self, state: DomainState, *, tick: int) -> None:
        """On each pod's baseline tick, remember what everybody in the domain used (see rings.UseLevels)."""
        alpha = self._policy.interference.baseline_alpha
        learners = [(key, pod) for key, pod in state.pods.items() if pod.learned_tick == tick]
        if not learners:
            return
        domain = state.domain
        use = dict(domain.activity)
        load = {k: None if a is None else a * domain.share.get(k, 1.0) for k, a in use.items()}
        load[UNATTRIBUTED] = domain.unattributed
        shared = domain.kind is DomainKind.PCIE
        if shared:
            # Every pod of a link learns on the ticks the link is not full: one set of levels (the link's use then)
            # serves them all, fed once a tick instead of once per pod (bench/bench_detection.py).
            levels = next((pod.levels for pod in state.pods.values() if pod.levels_shared), learners[0][1].levels)
            levels.update("use", use, alpha=alpha)
            levels.update("load", load, alpha=alpha)
        for key, pod in learners:
            if shared:
                if not pod.levels_shared:
                    pod.levels.share_levels(levels)
                    pod.levels_shared = True
            else:
                pod.levels.update("use", use, alpha=alpha)
                pod.levels.update("load", load, alpha=alpha)
            own = use.get(key)
            if own is not None:
                pod.levels.update_comovement(own, use, alpha=alpha, skip=key)

    def _before(self, pod: PodState) -> Before:
        count = self._policy.interference.min_steady_ticks
        levels = pod.levels
        return Before(
            use=levels.known("use", min_count=count),
            load=levels.known("load", min_count=count),
            comovement=levels.comovement(min_count=self._policy.interference.baseline_min_ticks),
        )

    def _judge(
        self,
        pod: PodState,
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
            pod.learned_tick = tick
            return False
        if base.count < policy.baseline_min_ticks:
            return False  # never saw it unhindered long enough: no baseline, no victim (e.g. synchronised starts)
        if pod.own_drop_tick is not None and tick - pod.own_drop_tick <= policy.correlation_window:
            return False
        if domain.kind is DomainKind.TIMESLICE and signal.source == "nvml" and not at_fair_share:
            # Below its fair level, max-min fairness (water-filling) has given the pod all it asked for: whatever
            # its share lost, it was its own demand, not a neighbour. Only a pod held AT the level can be starved,
            # unless the GPU's scheduler was seen to squeeze pods below it and has no idle time now (`squeezable`).
            return False
        pod.deviation = deviation
        pod.z_score = deviation / base.std if base.std > 0 else float("inf") if deviation > 0 else 0.0
        return beyond

    def _attribute(self, state: DomainState, *, tick: int, timestamp: float) -> None:
        policy = self._policy.interference
        activity = state.domain.activity
        low_mask = (1 << policy.release_window) - 1
        for key, pod in state.pods.items():
            if pod.last_seen != tick:
                continue
            count = pod.flags.bit_count()
            episode = pod.episode
            if episode is not None:
                use = activity.get(episode.culprit.key)
                gone = episode.culprit.key not in activity
                low = use is not None and use < policy.min_antagonist_use / 2
                episode.low = ((episode.low << 1) | int(low)) & low_mask
                # One low tick (a checkpoint write, a data-loader stall) does not end an episode; N of the last M do.
                if gone or count < policy.clear_flags or episode.low.bit_count() >= policy.release_low_ticks:
                    self._close(state, pod, tick=tick)
                elif pod.signal_tick == tick and use is not None:
                    episode.last_observed = tick  # fresh evidence: both sides were read this tick
                continue
            if pod.blind is not None:
                if count < policy.clear_flags:
                    pod.blind = None
                elif pod.signal_tick == tick:
                    pod.blind.last_observed = tick
            if count >= policy.flags_needed and pod.flags & 1:
                found = find_antagonist(
                    key,
                    domain=state.domain,
                    series=state.series,
                    before=self._before(pod),
                    policy=policy,
                    tenant_of=self._tenant_of,
                )
                if found is None and pod.blind is None and state.busy and blind_to_neighbours(state.domain, key):
                    pod.blind = BlindEpisode(tick, timestamp, tick)  # never lose a victim (detection/blind.py)
                if found is not None:
                    pod.blind = None
                    first_tick, since = tick, timestamp
                    previous = state.closed.get(found.ref.key)
                    if previous is not None and tick - previous.closed_tick <= policy.merge_gap_ticks:
                        # The same culprit again, soon after: one intermittent episode, so its persistence (which
                        # the action stage counts from `since`) is judged over the whole of it.
                        first_tick, since = previous.first_tick, previous.since
                    pod.episode = Episode(
                        found.ref, first_tick, since, found.correlation, found.rise, tick, found.excluded_rise
                    )

    @staticmethod
    def _close(state: DomainState, pod: PodState, *, tick: int) -> None:
        episode = pod.episode
        assert episode is not None
        pod.episode = None
        culprit = episode.culprit.key
        previous = state.closed.get(culprit)
        if previous is not None and previous.first_tick <= episode.first_tick:
            # Another victim's episode with the same culprit started earlier (or this one continued it).
            state.closed[culprit] = ClosedEpisode(previous.first_tick, previous.since, tick)
        else:
            state.closed[culprit] = ClosedEpisode(episode.first_tick, episode.since, tick)

    def _forget_stale(self, tick: int) -> None:
        stale = self._policy.interference.stale_ticks
        for key, state in list(self._domains.items()):
            if tick - state.last_tick > stale:
                del self._domains[key]
                continue
            for pod_key, pod in list(state.pods.items()):
                if tick - pod.last_seen > stale:
                    del state.pods[pod_key]
                    state.closed.pop(pod_key, None)
                    for ring in state.rings:
                        ring.forget(pod_key)
                    for other in state.pods.values():
                        other.levels.forget(pod_key)

    # -------------------------------------------------------------------------------------------- findings

    def _findings(self, attribution: Attribution, *, tick: int) -> list[Finding]:
        findings: list[Finding] = []
        for state in self._domains.values():
            groups: dict[str, list[tuple[str, PodState]]] = {}
            for key, pod in state.pods.items():
                if pod.episode is not None:
                    groups.setdefault(pod.episode.culprit.key, []).append((key, pod))
            for culprit_key, victims in sorted(groups.items()):
                findings.append(self._finding(state, culprit_key, victims, attribution, tick=tick))
            blind = [(key, pod.blind, pod.source) for key, pod in state.pods.items() if pod.blind is not None]
            if blind:
                findings.append(culprit_unknown_finding(state.domain, blind, tick=tick))
        return findings

    def _finding(
        self,
        state: DomainState,
        culprit_key: str,
        victims: list[tuple[str, PodState]],
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
        # unless the tenant's own signal says it suffers. Power, time-slicing and the PCIe link (its load and
        # every GI's share measured, the victim's idle SMs its damage) rest on direct NVML evidence.
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
        if domain.kind is DomainKind.TIMESLICE:
            evidence["scheduler"] = "proportional" if state.scheduler.proportional else "roundrobin"
        if domain.clock_loss is not None:
            evidence["clock_loss"] = round(domain.clock_loss, 4)
        if domain.busy is not None:
            evidence["busy"] = round(domain.busy, 4)
        if domain.kind is DomainKind.PCIE and domain.gpu.pcie_link_bytes_per_second:
            evidence["link_bytes_per_second"] = round(domain.gpu.pcie_link_bytes_per_second)
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
            gpu_uuid=domain.gpu.uuid,  # every sharing domain lies within one GPU (detection/domains.py)
        )

