"""Notices a step of the wall clock, so an operator can see one happened and that nothing acted on it.

Every guarantee of the action stage runs on the monotonic clock (action/pacing.py): an NTP step, a VM resumed from
suspend or a hand-set date changes only the timestamps written in Events, audit lines and samples. A step is still
worth knowing about: the samples' timestamps jump, and an episode's wall-clock `since` with them. Between two ticks
the wall clock must advance as the monotonic clock does; a difference beyond the tolerance is a step, counted as
``gpu_watchdog_errors_total{stage="clock",error="step_forward|step_backward"}`` and logged by the agent.
"""

from __future__ import annotations

from typing import Callable


class ClockStepWatch:
    """Compares the wall clock's advance with the monotonic clock's between two calls of `check`."""

    def __init__(self, *, wall: Callable[[], float], monotonic: Callable[[], float], tolerance: float) -> None:
        self._wall = wall
        self._monotonic = monotonic
        self._tolerance = tolerance
        self._last: tuple[float, float] | None = None

    def check(self) -> float | None:
        """The step in seconds (positive: forward) since the previous call, or None when the clocks agree."""
        now = (self._wall(), self._monotonic())
        last, self._last = self._last, now
        if last is None:
            return None
        step = (now[0] - last[0]) - (now[1] - last[1])
        return step if abs(step) > self._tolerance else None
