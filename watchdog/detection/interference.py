"""Cross-tenant interference, CPI²-style: first a victim that left its own baseline, then an antagonist by correlation.

Pure (no I/O, no asyncio). CPI² (Zhang et al., EuroSys 2013) flags a task whose CPI is an outlier against its own
history several times in a short window, and only then looks for the co-runner whose CPU use correlates with the
victim's degradation. We keep that order because it is what makes the detector precise: a neighbour that is merely
busy is never a culprit unless somebody measurably suffers, and a sufferer without a correlated neighbour is left
alone (its own load, the weather, a driver hiccup) — unless nobody's use could be read at all (an A100 in MIG
mode has no GPM): then it is reported with culprit unknown (`blind`), never dropped and never blamed on a guess.
The victim signals per domain and the traps they avoid are explained in docs/detection.md; the per-tick state
lives in `rings` and `levels`, the signals in `victim_signals`.
"""

from __future__ import annotations

from typing import Callable, Mapping

from watchdog.config.detection import DetectionPolicy
from watchdog.detection.antagonist import Before, find_antagonist
from watchdog.detection.blind import BlindEpisode, blind_to_neighbours, culprit_unknown_finding
from watchdog.detection.domain_types import TIME_SLICED, Domain, DomainKind
from watchdog.detection.episodes import ClosedEpisode, DomainState, Episode, PodState
from watchdog.detection.interference_finding import interference_finding
from watchdog.detection.levels import LevelSet, learn_domain, learn_link
from watchdog.detection.rings import UNATTRIBUTED, Baseline, SlotRing
from watchdog.detection.victim_signals import NVML, Signal, contended, fair_levels, nvml_signal, victim_signal
from watchdog.detection.view import DOMAINS, TickView
from watchdog.model import Attribution, Finding, PodRef


class InterferenceDetector:
    """Per-domain baselines, outlier flags and antagonist search; one finding per (domain, antagonist)."""

    name = "interference"
    needs = frozenset({DOMAINS})

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

    def step(self, view: TickView) -> list[Finding]:
        """Judge every sharing domain of the tick; ``view.external`` holds the tenants' own victim signals."""
        policy = self._policy.interference
        if not policy.enabled:
            self._domains.clear()
            return []
        tick, timestamp, external = view.tick, view.timestamp, view.external
        for domain in view.domains or ():
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
        return self._findings(view.attribution, tick=tick, borrowed_gpus=view.borrowed_gpus)

    # ---------------------------------------------------------------------------------------------- per tick

    def _observe(self, state: DomainState, *, busy: bool, tick: int, external: Mapping[str, float]) -> None:
        policy = self._policy.interference
        mask = (1 << policy.flags_window) - 1
        domain = state.domain
        # Only the power domain weighs what its pods drive of it (antagonist.py), and only the MPS domain keeps its
        # clients' own SM activity beside their DRAM use in the same ring: elsewhere the load is never read.
        power = domain.kind is DomainKind.POWER
        mps = domain.kind is DomainKind.MPS
        state.signal.advance()
        state.use.advance()
        state.flag.advance()
        if power:
            state.load.advance()
            state.load.set(UNATTRIBUTED, domain.unattributed)
        elif mps:
            state.load.advance()
        fair = fair_levels(domain)
        # Below its fair level a pod can be starved only by a scheduler whose shares follow demand, and only while
        # the GPU has no idle time left (detection/scheduler_model.py).
        timesliced = domain.kind in TIME_SLICED  # a time-sliced GPU, or best-effort vGPUs (detection/vgpu.py)
        squeezable = timesliced and state.scheduler.observe(domain, fair, policy=policy, tick=tick)
        overrides = self._policy.victim_signal_overrides
        own_activity = domain.victim_activity
        # Locals, not attribute reads: this loop runs for every pod of every domain on every tick.
        activities, shares, pods = domain.activity, domain.share, state.pods
        use_ring, load_ring, signal_ring, flag_ring = state.use, state.load, state.signal, state.flag
        min_active, tolerance = policy.victim_min_activity, policy.fair_share_tolerance
        alpha = policy.baseline_alpha
        for ref in domain.pods:
            key = ref.key
            activity = activities.get(key)
            own = activity if own_activity is None else own_activity.get(key)  # pcie: SM activity, not link use
            override = overrides.get(self._tenant_of(ref)) if overrides else None
            if override is None:
                rules, value = NVML, nvml_signal(domain, own)
            else:
                rules = victim_signal(domain, own, override=override, external=external.get(key))
                value = rules.value
            source = rules.source
            pod = pods.get(key)
            if pod is None or pod.source != source:
                pod = pods[key] = PodState(Baseline(), source)
            pod.last_seen = tick
            pod.fair = fair_level = fair.get(key)
            if activity is not None:
                use_ring.set(key, activity)
                if power:
                    load_ring.set(key, activity * shares.get(key, 1.0))
            if mps and own is not None:
                load_ring.set(key, own)
            outlier = False
            if value is not None:
                pod.signal_tick = tick
                signal_ring.set(key, value)
                # A tenant's own signal speaks for itself where the pod's use is unknown (an A100 MIG instance has
                # no GPM): it is the tenant's measure of the service it gets, not of the work it does.
                if (own >= min_active) if own is not None else source == "override":
                    if not busy and (power or override is not None):
                        pod.baseline.update(value, alpha=alpha)  # unhindered, and no own drop to notice (_judge)
                        pod.learned_tick = tick
                    else:
                        at_fair = squeezable or (
                            fair_level is not None and activity is not None and activity >= fair_level - tolerance
                        )
                        outlier = self._judge(pod, value, rules, domain, busy, at_fair, tick)
            pod.flags = ((pod.flags << 1) | outlier) & mask
            flag_ring.set(key, 1.0 if outlier else 0.0)
        self._learn_levels(state, tick=tick)

    def _learn_levels(self, state: DomainState, *, tick: int) -> None:
        """On each pod's baseline tick, remember what everybody in the domain used (see detection/levels.py)."""
        pods = state.pods
        if not any(pod.learned_tick == tick for pod in pods.values()):
            return
        alpha = self._policy.interference.baseline_alpha
        domain = state.domain
        victims = [(key, pod.levels, pod.learned_tick == tick) for key, pod in pods.items()]
        if domain.kind is DomainKind.PCIE:
            link = state.link_levels
            if link is None or not any(pod.levels.levels is link for pod in pods.values()):
                link = state.link_levels = LevelSet()
            learn_link(link, victims, domain.activity, alpha=alpha)
            return
        # Only the power domain weighs its members' use (antagonist.py): elsewhere the load is never read.
        learn_domain(victims, domain.activity, domain.share, domain.unattributed, alpha=alpha,
                     load=domain.kind is DomainKind.POWER)

    def _before(self, pod: PodState) -> Before:
        count = self._policy.interference.min_steady_ticks
        levels = pod.levels
        return Before(
            use=levels.known("use", min_count=count),
            load=levels.known("load", min_count=count),
            comovement=levels.comovement(min_count=self._policy.interference.baseline_min_ticks),
        )

    def _judge(
        self, pod: PodState, value: float, rules: Signal, domain: Domain, busy: bool, at_fair_share: bool, tick: int
    ) -> bool:
        """Is this tick an outlier for the active pod? ``rules``: how its signal's deviations are judged. On an
        unhindered tick it learns the baseline instead, noting an own drop where a share fell with idle capacity
        left (the power domain and an override learn without this call; see ``_observe``)."""
        policy = self._policy.interference
        base = pod.baseline
        nvml = rules.source == "nvml"
        deviation = value - base.mean
        floor = rules.min_deviation if rules.min_deviation is not None else policy.min_deviation
        floor = max(floor, rules.min_relative_deviation * abs(base.mean))
        beyond = base.count > 0 and deviation > max(policy.k_sigma * base.std, floor)
        beyond = beyond or (rules.threshold is not None and value >= rules.threshold)
        if not busy:
            if beyond:
                # The share fell while the device had idle capacity: the pod's own demand dropped, not a neighbour.
                pod.own_drop_tick = tick
            base.update(value, alpha=policy.baseline_alpha)
            pod.learned_tick = tick
            return False
        if base.count < policy.baseline_min_ticks:
            return False  # never saw it unhindered long enough: no baseline, no victim (e.g. synchronised starts)
        if pod.own_drop_tick is not None and tick - pod.own_drop_tick <= policy.correlation_window:
            return False
        if domain.kind in TIME_SLICED and nvml and not at_fair_share:
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
            if pod.last_seen != tick or not (pod.flags or pod.episode or pod.blind):
                continue  # unseen, or nothing flagged and nothing open: the common case, nothing to do
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

    def _findings(self, attribution: Attribution, *, tick: int, borrowed_gpus: frozenset[str]) -> list[Finding]:
        findings: list[Finding] = []
        for state in self._domains.values():
            groups: dict[str, list[tuple[str, PodState]]] = {}
            for key, pod in state.pods.items():
                if pod.episode is not None:
                    groups.setdefault(pod.episode.culprit.key, []).append((key, pod))
            for culprit_key, victims in sorted(groups.items()):
                findings.append(interference_finding(
                    state, culprit_key, victims, attribution, tick=tick, policy=self._policy.interference,
                    tenant_of=self._tenant_of, borrowed=state.domain.gpu.uuid in borrowed_gpus,
                ))
            blind = [(key, pod.blind, pod.source) for key, pod in state.pods.items() if pod.blind is not None]
            if blind:
                findings.append(culprit_unknown_finding(state.domain, blind, tick=tick))
        return findings
