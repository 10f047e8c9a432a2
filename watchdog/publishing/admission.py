"""Which connections a full HTTP listener keeps, so that whoever can open TCP connections cannot starve the probes.

A plain cap ("past N connections, close the newcomer") lets N idle sockets lock out the kubelet's liveness probe,
and the kubelet then restarts a healthy pod in a loop. The table here decides instead, for each new connection:

- one client (peer address) holds at most ``per_client`` connections: past that, its own oldest idle connection
  is closed to make room, so one client's flood evicts only itself;
- when every slot is taken, an idle connection (before its first request or between requests) is closed: the
  oldest of the client holding the most, so a client with one connection (a scraper, the kubelet) loses it last;
- when every slot is busy with a request, a newcomer gets one of ``probe_reserve`` extra slots that answer only the
  probe paths (the listener enforces that), so probes are never refused while requests are in flight;
- only when those are busy too is the newcomer refused.

Pure bookkeeping: no I/O and no clock; the listener closes what :meth:`ConnectionTable.admit` names.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Generic, Hashable, TypeVar

H = TypeVar("H", bound=Hashable)


class Verdict(enum.Enum):
    SERVE = "serve"
    PROBES_ONLY = "probes_only"  # a reserve slot: the probe paths are answered, nothing else
    REFUSE = "refuse"


@dataclass(frozen=True)
class Admission(Generic[H]):
    verdict: Verdict
    evict: tuple[H, ...] = ()  # connections to close now; already forgotten by the table


@dataclass
class _Entry:
    peer: str
    probes_only: bool
    busy: int = 0


class ConnectionTable(Generic[H]):
    """The connections a listener serves, by peer, in arrival order, each idle or busy with a request."""

    def __init__(self, *, capacity: int, per_client: int, probe_reserve: int) -> None:
        if capacity < 1 or per_client < 1 or probe_reserve < 0:
            raise ValueError(
                f"capacity and per_client must be at least 1 and probe_reserve at least 0, got capacity={capacity}, "
                f"per_client={per_client}, probe_reserve={probe_reserve}"
            )
        self.capacity, self.per_client, self.probe_reserve = capacity, per_client, probe_reserve
        self._entries: dict[H, _Entry] = {}  # insertion order = arrival order
        self._by_peer: dict[str, dict[H, None]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, handle: object) -> bool:
        return handle in self._entries

    def probes_only(self, handle: H) -> bool:
        return self._entries[handle].probes_only

    def admit(self, handle: H, peer: str) -> Admission[H]:
        """Registers ``handle`` from ``peer`` unless refused; the connections named in ``evict`` are to be closed."""
        if handle in self._entries:
            raise ValueError(f"connection {handle!r} is already admitted")
        evict: list[H] = []
        mine = self._by_peer.get(peer, {})
        if len(mine) >= self.per_client:
            own = self._oldest_idle(mine)
            if own is None:
                return Admission(Verdict.REFUSE)
            evict.append(self._drop(own))
        serving = sum(not entry.probes_only for entry in self._entries.values())
        probes = len(self._entries) - serving
        if serving < self.capacity:
            verdict = Verdict.SERVE
        elif (victim := self._victim(probes_only=False)) is not None:
            evict.append(self._drop(victim))
            verdict = Verdict.SERVE
        elif probes < self.probe_reserve:
            verdict = Verdict.PROBES_ONLY
        elif (victim := self._victim(probes_only=True)) is not None:
            evict.append(self._drop(victim))
            verdict = Verdict.PROBES_ONLY
        else:  # unreachable after an own eviction: that freed a slot of one kind or the other
            return Admission(Verdict.REFUSE, tuple(evict))
        self._entries[handle] = _Entry(peer=peer, probes_only=verdict is Verdict.PROBES_ONLY)
        self._by_peer.setdefault(peer, {})[handle] = None
        return Admission(verdict, tuple(evict))

    def started(self, handle: H) -> None:
        """A request is being handled on ``handle``: it is not idle until :meth:`finished`."""
        entry = self._entries.get(handle)
        if entry is not None:
            entry.busy += 1

    def finished(self, handle: H) -> None:
        entry = self._entries.get(handle)
        if entry is not None and entry.busy > 0:
            entry.busy -= 1

    def idle(self, handle: H) -> bool:
        entry = self._entries.get(handle)
        return entry is not None and entry.busy == 0

    def forget(self, handle: H) -> None:
        """The connection closed (no-op when it was evicted or refused)."""
        if handle in self._entries:
            self._drop(handle)

    def _drop(self, handle: H) -> H:
        entry = self._entries.pop(handle)
        peers = self._by_peer[entry.peer]
        del peers[handle]
        if not peers:
            del self._by_peer[entry.peer]
        return handle

    def _oldest_idle(self, handles: dict[H, None]) -> H | None:
        return next((handle for handle in handles if self._entries[handle].busy == 0), None)

    def _victim(self, *, probes_only: bool) -> H | None:
        """The oldest idle connection of the client holding the most connections, among one kind of slot."""
        best: H | None = None
        best_held = 0
        for handle, entry in self._entries.items():  # arrival order: the first found of a count is the oldest
            if entry.busy or entry.probes_only is not probes_only:
                continue
            held = len(self._by_peer[entry.peer])
            if held > best_held:
                best, best_held = handle, held
        return best
