"""A node prerequisite as ``gpu-watchdog probe`` reports it: one line, its status and what to do about it.

The facts behind the checks are read by two stages that never import each other: the host's files (kubelet socket,
/proc, cgroups) by attribution, the driver's answers (versions, persistence, MIG, GPM) by sampling. Both hand back
this one type, so the probe renders every check alike in its table and its JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["ok", "warn", "missing"]
"""ok: as the agent needs it. warn: the agent runs, with less (a metric, a fallback) or at a cost. missing: a part
of the agent cannot work until the node is fixed (no pod attribution, no NVML)."""


@dataclass(frozen=True, slots=True)
class Prerequisite:
    check: str  # stable key for scripts: kubelet_socket, host_pids, cgroups, driver, persistence_mode, mig_mode, gpm
    title: str  # what the table shows
    status: Status
    detail: str  # what was found, in words
    fix: str = ""  # what to do, when the status is not ok
    gpus: tuple[tuple[int, str], ...] = ()  # (GPU index, its reading) for per-GPU checks

    def as_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"check": self.check, "title": self.title, "status": self.status,
                                 "detail": self.detail}
        if self.fix:
            entry["fix"] = self.fix
        if self.gpus:
            entry["gpus"] = {str(index): reading for index, reading in self.gpus}
        return entry
