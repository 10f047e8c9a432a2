"""Which kind of scheduler shares a time-sliced GPU, learned from the GPU's own answers whenever it is contended.

Pure (no I/O). The time-sliced victim rule needs to know whether a pod whose share fell below its fair level can
have been starved. Under the device plugin's time-slicing the GPU's round-robin time slices are max-min fair: a pod
below the level got all it asked for, so its lower share is its own demand. Under MPS without limits, or any
scheduler whose shares follow demand, a greedy client takes time from a modest one even below its fair level. NVML
does not say which (``nvmlDeviceGetProcessUtilization`` reports shares, not demand), and from shares alone the two
cannot be told apart while the GPU stays saturated at a steady state: a modest pod squeezed by a growing neighbour
and a modest pod whose own demand falls next to a greedy one look the same.

They differ on the way into contention, measured against the last tick the GPU had idle time (every pod then got
its demand: any work-conserving scheduler). Two ways in, both judged:

* **a step** (the tick before had at least ``min_deviation`` idle, this one has none): under max-min fairness a pod
  keeps what it had, or is held at its fair level if it had more; under demand-following shares it loses part of it
  at once, below the level too. The onset votes either way.
* **a ramp** (a neighbour's demand grows over minutes and the idle time runs out a little at a time): nobody loses
  anything at the tick contention begins, under either scheduler. Every contended tick after it (until the GPU has
  idle time again; a stretch that began with a step is left to its onset's vote) is compared with the last idle
  tick: under max-min a pod below its level keeps what it had however far the neighbour grows; under
  demand-following shares it keeps losing while the neighbour keeps gaining. A pod below its level that lost at
  least ``min_deviation`` while a neighbour gained as much, on ``flags_needed`` contended ticks in a row within
  ``scheduler_evidence_ticks`` of the last idle tick, votes for demand-following shares. A ramp never votes for
  max-min (nothing distinguishes it from the first ticks of a demand-following ramp), so it leaves an earlier
  verdict standing.

"Contended" is the GPU's own account (utilization.gpu, or the shares plus the time GPM says the engine spent
switching contexts: domains.timeslice_busy), never the shares summing to a threshold: switching overhead, driver
rounding or a fourth idle context make the shares of a saturated GPU sum well below 1. The verdict is the domain's
until new evidence says otherwise, and it starts as max-min fair, the scheduler that never makes a victim of a pod
below its level, so a GPU whose behaviour was never seen keeps every existing protection.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from watchdog.config.detection import InterferencePolicy
from watchdog.detection.domain_types import Domain


@dataclass(slots=True)
class SchedulerEvidence:
    """One time-sliced domain's recent ticks and its verdict: does the scheduler squeeze a pod below its level?"""

    proportional: bool = False  # shares follow demand (MPS-like); False: max-min fair, or never seen
    voted_tick: int | None = None  # the last tick that gave a verdict
    previous_tick: int | None = None
    previous_busy: float | None = None
    previous_use: dict[str, float] = field(default_factory=dict)
    idle_tick: int | None = None  # the last tick with idle time to spare (≥ min_deviation): every pod got its demand
    idle_use: dict[str, float] = field(default_factory=dict)
    stepped: bool = False  # contention since the last idle tick began by a step, whose onset voted
    squeezed_run: int = 0  # consecutive contended ticks of a ramp on which a pod below its level lost

    def observe(self, domain: Domain, fair: dict[str, float], *, policy: InterferencePolicy, tick: int) -> bool:
        """Weigh this tick's evidence; returns whether a pod below its fair level can be squeezed now.

        ``fair_share_tolerance``: how close to 1 a fully busy GPU is, and how far a pod that kept its share may
        move; ``min_deviation``: how much a pod must lose to count as squeezed, and the idle time a tick must have
        for every pod to have got its demand (a GPU between the two is neither: noise around saturation).
        """
        tolerance, min_drop = policy.fair_share_tolerance, policy.min_deviation
        busy = domain.busy
        use = {key: value for key, value in domain.activity.items() if value is not None}
        full = busy is not None and busy >= 1.0 - tolerance
        if busy is not None and busy <= 1.0 - min_drop:
            self.idle_tick, self.idle_use, self.stepped, self.squeezed_run = tick, use, False, 0
        elif full:
            if self.previous_tick == tick - 1 and self.previous_busy is not None and self.previous_busy <= 1.0 - min_drop:
                self._vote_onset(use, fair, tick=tick, policy=policy)  # a step: the onset itself is the evidence
                self.stepped = True
            elif not self.stepped:
                self._weigh_ramp(use, fair, tick=tick, policy=policy)  # a ramp: every contended tick is
        self.previous_tick, self.previous_busy, self.previous_use = tick, busy, use
        return self.proportional and full

    def _vote_onset(self, use: dict[str, float], fair: dict[str, float], *, tick: int,
                    policy: InterferencePolicy) -> None:
        tolerance, min_drop = policy.fair_share_tolerance, policy.min_deviation
        squeezed = kept = 0
        for key, before in self.previous_use.items():
            now, level = use.get(key), fair.get(key)
            if now is None or level is None or before < policy.victim_min_activity:
                continue  # gone, unknown or idle: no evidence
            # Max-min fairness leaves it what it had, or holds it at its level if it had more.
            max_min = min(before, level)
            if now < max_min - min_drop:
                squeezed += 1
            elif abs(now - max_min) <= tolerance:
                kept += 1
            # A pod whose own use rose (the one that saturated the GPU) says nothing either way.
        if squeezed and not kept:
            self.proportional, self.voted_tick = True, tick
        elif kept and not squeezed:
            self.proportional, self.voted_tick = False, tick

    def _weigh_ramp(self, use: dict[str, float], fair: dict[str, float], *, tick: int,
                    policy: InterferencePolicy) -> None:
        if self.idle_tick is None or tick - self.idle_tick > policy.scheduler_evidence_ticks:
            self.squeezed_run = 0
            return  # too long since every pod last got its demand: what it asks now is unknown
        min_drop = policy.min_deviation
        lost = gained = 0.0
        for key, before in self.idle_use.items():
            now = use.get(key)
            if now is None:
                continue
            level = fair.get(key)
            if before >= policy.victim_min_activity and level is not None and before < level:
                lost = max(lost, before - now)  # below its level: max-min would leave it all it had
            gained = max(gained, now - before)
        if lost >= min_drop and gained >= min_drop:
            self.squeezed_run += 1
            if self.squeezed_run >= policy.flags_needed:
                self.proportional, self.voted_tick = True, tick
        else:
            self.squeezed_run = 0
