"""Reads ``<root>/<pid>/cgroup`` and ``<root>/<pid>/comm`` for the PIDs NVML reports: the only file I/O of
attribution.

NVML names processes by PID only; ``comm`` is how the agent knows a process by name: the command of a process in no
pod, and the MPS server (``nvidia-cuda-mps-server``), which runs in the device plugin's MPS control daemon pod and
holds its clients' CUDA contexts. The server is infrastructure, never a tenant: it is reported apart
(``ProcReader.infrastructure``) so no later stage counts its memory with its clients' or blames it.

The proc root is a constructor argument, so tests point it at a fixture tree and a DaemonSet at the host's /proc
mounted read-only; parsing is ``watchdog.attribution.cgroups``'s.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

from watchdog.attribution.cgroups import PodProcess, cgroup_path, parse_cgroup
from watchdog.model import HostProcess

MPS_SERVER_COMMANDS = frozenset({"nvidia-cuda-mps", "nvidia-cuda-mps-server"})
"""``comm`` of the MPS server: the kernel keeps 15 characters (TASK_COMM_LEN 16), so ``nvidia-cuda-mps-server`` reads
``nvidia-cuda-mps``. ``nvidia-cuda-mps-control`` truncates alike, but the control daemon opens no GPU context, so
NVML never lists it; the full name is accepted for readers (and traces) that keep it."""


class ProcReader:
    """Reads ``<root>/<pid>/cgroup`` for the PIDs NVML reports, caching by PID.

    A process cannot leave its pod, so a PID's answer holds while the PID is alive; an entry is dropped as soon as
    the PID is no longer asked for (NVML stopped reporting it: the process ended), so a recycled PID is read afresh.
    Vanished processes and permission errors are counted and skipped, never raised: the tick goes on without them.
    A PID whose cgroup names no pod keeps its cgroup path and command (``hosts``), for the report of GPU use from
    outside Kubernetes; an unreadable ``comm`` leaves the command empty and is counted like the cgroup's failures.
    """

    __slots__ = ("_root", "_read_text", "_cache", "_hosts", "_infrastructure", "_wanted", "_counters")

    def __init__(self, root: str = "/proc", *, read_text: Callable[[str], str] | None = None) -> None:
        """``read_text`` replaces the file read (default: open and read as UTF-8); tests use it to raise
        PermissionError, which a root test process cannot provoke with file modes."""
        self._root = root.rstrip("/") or "/"
        self._read_text = read_text or _read_text
        self._cache: dict[int, PodProcess | None] = {}
        self._hosts: dict[int, HostProcess] = {}  # cached PIDs whose cgroup names no pod
        self._infrastructure: set[int] = set()  # cached PIDs of the MPS server
        self._wanted: frozenset[int] = frozenset()
        self._counters = {"reads": 0, "cache_hits": 0, "vanished": 0, "denied": 0, "errors": 0}

    @property
    def counters(self) -> Mapping[str, int]:
        """reads, cache_hits, vanished, denied, errors: cumulative, for the service to export."""
        return dict(self._counters)

    def read(self, pids: Iterable[int]) -> dict[int, PodProcess]:
        """PID → (pod UID, container ID) for those of ``pids`` that run in a pod; others are left out."""
        wanted = set()
        for pid in pids:
            if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
                raise ValueError(f"not a process id: {pid!r}")
            wanted.add(pid)
        for ended in self._cache.keys() - wanted:
            del self._cache[ended]
            self._hosts.pop(ended, None)
            self._infrastructure.discard(ended)
        self._wanted = frozenset(wanted)
        found: dict[int, PodProcess] = {}
        for pid in wanted:
            if pid in self._cache:
                self._counters["cache_hits"] += 1
                entry = self._cache[pid]
            else:
                entry = self._read_one(pid)
            if entry is not None:
                found[pid] = entry
        return found

    def _read_one(self, pid: int) -> PodProcess | None:
        path = f"{self._root}/{pid}/cgroup"
        self._counters["reads"] += 1
        try:
            text = self._read_text(path)
        except (FileNotFoundError, ProcessLookupError):
            # The process ended between NVML's report and this read; ask again if NVML still reports it.
            self._counters["vanished"] += 1
            return None
        except PermissionError:
            # Without CAP_SYS_PTRACE-equivalent access (or with hidepid=2) the file is unreadable; that will not
            # change while the process lives, so remember the miss instead of failing every tick.
            self._counters["denied"] += 1
            self._cache[pid] = None
            return None
        except OSError:
            self._counters["errors"] += 1
            return None
        entry = parse_cgroup(text)
        self._cache[pid] = entry
        command = self._read_comm(pid)
        if command in MPS_SERVER_COMMANDS:
            self._infrastructure.add(pid)
        elif entry is None:
            self._hosts[pid] = HostProcess(cgroup=cgroup_path(text), command=command)
        return entry

    @property
    def infrastructure(self) -> frozenset[int]:
        """The last ``read``'s PIDs that are the MPS server (by ``comm``), in a pod or not."""
        return frozenset(self._infrastructure & self._wanted)

    @property
    def hosts(self) -> Mapping[int, HostProcess]:
        """PID → cgroup path and command of the last ``read``'s PIDs that run in no pod (their cgroup was read)."""
        return {pid: host for pid, host in self._hosts.items() if pid in self._wanted}

    def _read_comm(self, pid: int) -> str:
        try:
            return self._read_text(f"{self._root}/{pid}/comm").strip()
        except (FileNotFoundError, ProcessLookupError):
            self._counters["vanished"] += 1
        except PermissionError:
            self._counters["denied"] += 1
        except OSError:
            self._counters["errors"] += 1
        return ""


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()
