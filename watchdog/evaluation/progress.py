"""Progress of a long offline run (record, replay, eval) on a terminal: ticks done, ticks per second, ETA.

A day of one node is 86,400 ticks; minutes without a sign of life look like a hang. Plain ``\\r`` lines on
stderr, at most five a second, and nothing at all when stderr is not a terminal (a log file or a pipe must stay
clean).
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO


class Progress:
    """``update(n)`` after each unit of work; ``close()`` ends the line. ``total`` None: no ETA."""

    def __init__(self, label: str, *, total: int | None = None, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic, unit: str = "ticks") -> None:
        self.label, self.total, self.unit = label, total, unit
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty()
        self.clock = clock
        self.done = 0
        self.fraction: float | None = None  # of the work done, when only that is known (bytes of a trace read)
        self._started = clock()
        self._shown = float("-inf")

    def line(self) -> str:
        elapsed = max(self.clock() - self._started, 1e-9)
        rate = self.done / elapsed
        text = f"{self.label}: {self.done}"
        if self.total:
            text += f"/{self.total}"
        one = self.done == 1 and not self.total  # "1 tick", but "1/100 ticks"
        text += f" {self.unit.removesuffix('s') if one else self.unit}, {rate:.0f} {self.unit}/s"
        if self.total and rate > 0:
            text += f", ETA {max(0.0, (self.total - self.done) / rate):.0f} s"
        elif self.fraction:
            text += f", {100 * self.fraction:.0f} %, ETA {elapsed * (1 - self.fraction) / self.fraction:.0f} s"
        return text

    def update(self, n: int = 1) -> None:
        self.done += n
        now = self.clock()
        if self.enabled and now - self._shown >= 0.2:
            self._shown = now
            self.stream.write("\r" + self.line() + "\x1b[K")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r" + self.line() + "\x1b[K\n")
            self.stream.flush()


class ProgressSink:
    """A TickSink (watchdog.service.pipeline) that counts the agent's ticks into a Progress: `record`'s progress."""

    stage = "progress"

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def tick_done(self, result: object) -> None:
        self.progress.update()
