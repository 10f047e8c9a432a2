"""Fixed stand-ins for the sources ``attribution.stage.NodeAttributor`` reads: the kubelet's assignments as
``KubeletAssignments`` holds them, and the /proc reader. The pod and slice caches need no stand-in (the real
``PodCache`` and ``SliceCache`` are plain data)."""

from __future__ import annotations

from typing import Iterable, Mapping

from watchdog.model import ClaimDevice, DeviceAssignment, HostProcess


class FixedKubelet:
    """What the stage reads of ``KubeletAssignments``, set by the test; notes and refresh requests are kept."""

    def __init__(self, assignments: Iterable[DeviceAssignment] = (), *,
                 claim_devices: Iterable[ClaimDevice] = ()) -> None:
        self.assignments = tuple(assignments)
        self.claim_devices = tuple(claim_devices)
        self.ok = True
        self.listed_at = 0.0
        self.unknown: list[tuple[str, float]] = []
        self.refreshes = 0

    def note_unknown(self, device: str, now: float) -> None:
        self.unknown.append((device, now))

    def request_refresh(self) -> None:
        self.refreshes += 1


class FixedProc:
    """``ProcReader`` over a fixed table PID → (pod UID, container ID)."""

    def __init__(self, table: Mapping[int, tuple[str, str | None]], *, counters: Mapping[str, int] | None = None,
                 hosts: Mapping[int, HostProcess] | None = None, infrastructure: Iterable[int] = ()) -> None:
        self.table = dict(table)
        self.counters = dict(counters or {})
        self.hosts = dict(hosts or {})
        self.infrastructure = frozenset(infrastructure)

    def read(self, pids: Iterable[int]) -> dict[int, tuple[str, str | None]]:
        return {pid: self.table[pid] for pid in pids if pid in self.table}
