"""The simulation's only notion of time.

Everything the simulated node reports is a pure function of this clock's reading, so a test or a replay moves
time by calling ``advance`` instead of sleeping, and two runs that advance the same way see identical numbers.
Listeners let the node wake a thread blocked in nvmlEventSetWait when time passes a scheduled Xid.

Two readings: ``elapsed()`` is the simulated seconds since the start (what tick arithmetic uses), ``now()`` is
``epoch + elapsed()``, the time the agent and the fake API server report. Tests and traces keep ``epoch`` 0 so
their numbers stay small and stable; the demo and ``run --simulate`` pass the wall time at start, so timestamps,
``time() - …`` alerts and `kubectl describe` ages read like a real node's.
"""

from __future__ import annotations

import threading
from typing import Callable


class SimClock:
    """A settable clock in seconds; ``now()`` matches the ``time.time``-like callables the agent injects."""

    def __init__(self, start: float = 0.0, *, epoch: float = 0.0) -> None:
        if start < 0:
            raise ValueError(f"SimClock start must be >= 0, got {start}")
        if epoch < 0:
            raise ValueError(f"SimClock epoch must be >= 0, got {epoch}")
        self.epoch = float(epoch)
        self._now = float(start)  # simulated seconds since the start
        self._lock = threading.Lock()
        self._listeners: list[Callable[[float], None]] = []

    def now(self) -> float:
        """The reported time: ``epoch`` plus the simulated seconds elapsed."""
        return self.epoch + self._now

    def elapsed(self) -> float:
        """Simulated seconds since the start; ticks are counted from this, never from ``now()``."""
        return self._now

    __call__ = now  # so the clock itself can be passed where a ``Callable[[], float]`` is expected

    def advance(self, seconds: float) -> float:
        """Move time forward (never back) and tell the listeners ``now()``; returns the new ``now()``."""
        if seconds < 0:
            raise ValueError(f"time only moves forward; advance({seconds})")
        with self._lock:
            self._now += seconds
            now = self.epoch + self._now
            listeners = list(self._listeners)
        for listener in listeners:
            listener(now)
        return now

    def set(self, when: float) -> float:
        """Jump to ``when`` simulated seconds since the start (not earlier than ``elapsed()``)."""
        return self.advance(when - self._now)

    def subscribe(self, listener: Callable[[float], None]) -> Callable[[], None]:
        """Call ``listener(now)`` after every advance; returns a function that unsubscribes it."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe
