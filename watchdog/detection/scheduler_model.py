"""Which kind of scheduler shares a time-sliced GPU, learned from the GPU's own answers where contention begins.

Pure (no I/O). The time-sliced victim rule needs to know whether a pod whose share fell below its fair level can
have been starved. Under the device plugin's time-slicing the GPU's round-robin time slices are max-min fair: a pod
below the level got all it asked for, so its lower share is its own demand. Under MPS (the device plugin's
``sharing.mps``), or any scheduler whose shares follow demand, a greedy client takes time from a modest one even
below its fair level. NVML does not say which (``nvmlDeviceGetProcessUtilization`` reports shares, not demand), and
from shares alone the two cannot be told apart while the GPU stays saturated: a modest pod squeezed by a growing
neighbour and a modest pod whose own demand falls next to a greedy one look the same.

They differ at the tick contention begins. One tick the GPU had idle time, so every pod got its demand (any
work-conserving scheduler); the next it is fully busy. Under max-min fairness a pod keeps what it had, or is held
at its fair level if it had more; under demand-following shares it loses part of it at once, below the level too. Each such onset votes; the verdict is
the domain's until the next onset says otherwise, and it starts as max-min fair, the scheduler that never makes a
victim of a pod below its level, so a GPU whose behaviour was never seen keeps every existing protection.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from watchdog.config.detection import InterferencePolicy
from watchdog.detection.domain_types import Domain


@dataclass(slots=True)
class SchedulerEvidence:
    """One time-sliced domain's last tick and its verdict: does the scheduler squeeze a pod below its fair level?"""

    proportional: bool = False  # shares follow demand (MPS-like); False: max-min fair, or never seen
    voted_tick: int | None = None  # the last onset that gave a verdict
    previous_tick: int | None = None
    previous_busy: float | None = None
    previous_use: dict[str, float] = field(default_factory=dict)

    def observe(self, domain: Domain, fair: dict[str, float], *, policy: InterferencePolicy, tick: int) -> bool:
        """Vote when this tick starts contention; returns whether a pod below its fair level can be squeezed now.

        ``fair_share_tolerance``: how close to 1 a fully busy GPU is, and how far a pod that kept its share may
        move; ``min_deviation``: how much a pod must lose at once to count as squeezed (also the idle time the tick
        before must have had, so that everybody then got their demand).
        """
        tolerance, min_drop = policy.fair_share_tolerance, policy.min_deviation
        min_activity = policy.victim_min_activity
        busy = domain.busy
        use = {key: value for key, value in domain.activity.items() if value is not None}
        onset = (
            busy is not None
            and busy >= 1.0 - tolerance
            and self.previous_tick == tick - 1
            and self.previous_busy is not None
            and self.previous_busy <= 1.0 - min_drop
        )
        if onset:
            self._vote(use, fair, tick=tick, tolerance=tolerance, min_drop=min_drop, min_activity=min_activity)
        self.previous_tick, self.previous_busy, self.previous_use = tick, busy, use
        return self.proportional and busy is not None and busy >= 1.0 - tolerance

    def _vote(
        self,
        use: dict[str, float],
        fair: dict[str, float],
        *,
        tick: int,
        tolerance: float,
        min_drop: float,
        min_activity: float,
    ) -> None:
        squeezed = kept = 0
        for key, before in self.previous_use.items():
            now, level = use.get(key), fair.get(key)
            if now is None or level is None or before < min_activity:
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
