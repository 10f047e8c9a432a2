"""Event sets for the simulated nvmlEventSetWait: real blocking, simulated timing.

The agent runs nvmlEventSetWait in a thread with a bounded timeout (NVML is thread-safe, nvml.h; pynvml's ctypes
calls release the GIL), so the simulation must block
for real — on a ``threading.Condition`` — until an event is due or the timeout passes, and must wake that thread
when a test pushes an event or advances the simulated clock past a scheduled one. Semantics follow nvml.h:
an event set only sees events of the types it registered, on the GPUs it registered them for, that happen after
the registration; each set consumes events independently.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

GPU_LOST = "gpu-lost"


@dataclass(frozen=True, slots=True)
class SimEvent:
    sequence: int
    gpu: int
    event_type: int
    data: int
    gpu_instance: int
    compute_instance: int
    tick: int


@dataclass(order=True, slots=True)
class _Scheduled:
    tick: int
    order: int
    gpu: int = field(compare=False)
    event_type: int = field(compare=False)
    data: int = field(compare=False)
    instance: int | None = field(compare=False)  # index into the GPU's mig list, resolved when due


@dataclass(slots=True)
class _EventSet:
    registered: dict[int, tuple[int, int]] = field(default_factory=dict)  # gpu → (mask, first sequence)
    cursor: int = 0  # position in the log; everything before it was delivered or skipped
    lost_reported: set[int] = field(default_factory=set)


class EventHub:
    """The node's event log and the event sets reading it."""

    def __init__(self, *, current_tick: Callable[[], int],
                 resolve_instance: Callable[[int, int | None, int], tuple[int, int]],
                 is_lost: Callable[[int], bool]) -> None:
        self._condition = threading.Condition()
        self._log: list[SimEvent] = []
        self._scheduled: list[_Scheduled] = []
        self._order = itertools.count()
        self._sets: dict[int, _EventSet] = {}
        self._current_tick = current_tick
        self._resolve_instance = resolve_instance
        self._is_lost = is_lost

    def schedule(self, *, tick: int, gpu: int, event_type: int, data: int, instance: int | None) -> None:
        with self._condition:
            bisect.insort(self._scheduled, _Scheduled(tick, next(self._order), gpu, event_type, data, instance))
            self._condition.notify_all()

    def push(self, *, gpu: int, event_type: int, data: int, instance: int | None) -> None:
        """An event happening now."""
        self.schedule(tick=self._current_tick(), gpu=gpu, event_type=event_type, data=data, instance=instance)

    def notify(self) -> None:
        """Time moved: let waiters look again."""
        with self._condition:
            self._condition.notify_all()

    def create_set(self, key: int) -> None:
        with self._condition:
            self._sets[key] = _EventSet(cursor=len(self._log))

    def free_set(self, key: int) -> None:
        with self._condition:
            del self._sets[key]

    def has_set(self, key: int) -> bool:
        return key in self._sets

    def register(self, key: int, *, gpu: int, mask: int) -> None:
        with self._condition:
            self._release_due()
            event_set = self._sets[key]
            old_mask, _ = event_set.registered.get(gpu, (0, 0))
            event_set.registered[gpu] = (old_mask | mask, len(self._log))

    def wait(self, key: int, timeout_seconds: float) -> SimEvent | str | None:
        """The next event for the set, GPU_LOST once per lost registered GPU, or None after the timeout."""
        deadline = time.monotonic() + max(timeout_seconds, 0.0)
        with self._condition:
            while True:
                event_set = self._sets[key]  # KeyError: freed meanwhile
                self._release_due()
                for gpu in event_set.registered:
                    if gpu not in event_set.lost_reported and self._is_lost(gpu):
                        event_set.lost_reported.add(gpu)
                        return GPU_LOST
                event = self._next_for(event_set)
                if event is not None:
                    return event
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._condition.wait(remaining)

    def _next_for(self, event_set: _EventSet) -> SimEvent | None:
        while event_set.cursor < len(self._log):
            event = self._log[event_set.cursor]
            event_set.cursor += 1
            mask, first = event_set.registered.get(event.gpu, (0, 0))
            if event.event_type & mask and event.sequence >= first:
                return event
        return None

    def _release_due(self) -> None:
        tick = self._current_tick()
        while self._scheduled and self._scheduled[0].tick <= tick:
            due = self._scheduled.pop(0)
            gi, ci = self._resolve_instance(due.gpu, due.instance, due.tick)
            self._log.append(SimEvent(sequence=len(self._log), gpu=due.gpu, event_type=due.event_type,
                                      data=due.data, gpu_instance=gi, compute_instance=ci, tick=due.tick))
