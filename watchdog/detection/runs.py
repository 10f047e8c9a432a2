"""How long a condition has held, per finding key: the `for` and the first tick/since that findings carry.

Pure (no I/O). Each detector names its conditions by the finding key they would produce; a key observed true
extends its run, a key observed false ends it, and a key that could not be observed this tick (a GPU missing from
the sample) is left alone, so a gap in the data neither resolves nor restarts a finding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from watchdog.model import Finding


@dataclass(slots=True)
class Run:
    """One uninterrupted stretch of ticks where a condition held."""

    first_tick: int
    since: float
    last_tick: int
    ticks: int = 1
    active: bool = False  # reached its `for`; stays True until the condition ends (hysteresis is the caller's)


class Runs:
    """The open runs of one detector, by key."""

    def __init__(self) -> None:
        self._runs: dict[str, Run] = {}

    def hold(self, key: str, *, tick: int, timestamp: float, for_ticks: int) -> Run:
        """The condition holds at `tick`: start or extend its run; it becomes active after `for_ticks` ticks."""
        run = self._runs.get(key)
        if run is None:
            run = self._runs[key] = Run(first_tick=tick, since=timestamp, last_tick=tick)
        elif tick != run.last_tick:
            run.ticks += 1
            run.last_tick = tick
        if run.ticks >= for_ticks:
            run.active = True
        return run

    def end(self, key: str) -> None:
        self._runs.pop(key, None)

    def get(self, key: str) -> Run | None:
        return self._runs.get(key)

    def keys(self) -> list[str]:
        return list(self._runs)

    def end_unless(self, observed_true: set[str], *, missing: Callable[[str], bool] | None = None) -> None:
        """End every run not observed true this tick, except those for which `missing(key)` says data was absent."""
        for key in list(self._runs):
            if key not in observed_true and not (missing is not None and missing(key)):
                del self._runs[key]


def report_open(open_findings: dict[str, Finding], runs: Runs, *, tick: int, stale_ticks: int) -> list[Finding]:
    """The open findings at ``tick``: those not re-judged this tick are marked unobserved, and dropped (with their
    run) once ``stale_ticks`` old. ``open_findings`` is the detector's own map and is pruned in place."""
    findings = []
    for key, finding in list(open_findings.items()):
        if tick - finding.last_tick > stale_ticks:
            del open_findings[key]
            runs.end(key)
        else:
            findings.append(finding if finding.last_tick == tick else replace(finding, observed=False))
    return findings
