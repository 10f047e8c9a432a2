"""The parts that run beside the cycle, each adapted to the one shape the cycle reads them in (``StatusSource``).

The kill switch, the Xid event thread, the MQTT publisher and the flight recorder each run on their own; the cycle
only needs, once per tick, what each puts in the snapshot and whether it is healthy. Adapting them here keeps their
own modules free of the service's vocabulary, and a new such part is one adapter and one line in the agent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from watchdog.service.pipeline import SourceStatus


@dataclass(frozen=True, slots=True)
class Source:
    """A named status source built from one function."""

    name: str
    read: Callable[[], SourceStatus]

    def status(self) -> SourceStatus:
        return self.read()


def kill_switch(switch) -> Source:
    """``action.killswitch.KillSwitch``: paused, and whether its state is known (no send while it is not)."""
    return Source("kill_switch",
                  lambda: SourceStatus({"paused": switch.paused(), "kill_switch_known": not switch.unknown}))


def xid_events(watcher) -> Source:
    """``sampling.xid_watcher.XidWatcher``: its health is reported like a stage's (``events``)."""
    def read() -> SourceStatus:
        healthy = watcher.healthy  # running, registered on a GPU, last wait ended well
        return SourceStatus(healthy=healthy, detail="" if healthy else "Xid events are not being received")
    return Source("events", read)


def counters(name: str, read: Callable[[], Mapping[str, int]]) -> Source:
    """A part whose snapshot field is its own counters (``mqtt``, ``flight_recorder``)."""
    return Source(name, lambda: SourceStatus({name: read()}))
