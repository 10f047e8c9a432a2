"""Writes the /proc/<pid>/cgroup and /proc/<pid>/comm files a real node would have for the simulated GPU processes.

The agent's ProcReader reads them exactly as it reads the host's /proc, so the simulated processes are placed in
their pods by the same cgroup parsing a real node relies on (containerd under the systemd cgroup driver, cgroup v2).
A process in no pod (scenario ``host_processes``) gets its own cgroup path and command instead.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Iterable

from watchdog.testbed.gpu_node import SimProcess


def container_id_for(pod_uid: str, container: str) -> str:
    """A stable 64-hex container ID, as containerd writes them."""
    return hashlib.sha256(f"{pod_uid}/{container}".encode()).hexdigest()


def cgroup_line(*, pod_uid: str, container_id: str, qos: str = "burstable") -> str:
    slice_uid = pod_uid.replace("-", "_")
    return (
        f"0::/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{slice_uid}.slice/"
        f"cri-containerd-{container_id}.scope\n"
    )


class ProcTree:
    """Keeps ``root/<pid>/cgroup`` in step with the processes running on the simulated node."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._pids: set[int] = set()

    def sync(self, processes: Iterable[SimProcess]) -> None:
        wanted: dict[int, SimProcess] = {p.pid: p for p in processes}
        for pid in self._pids - wanted.keys():
            shutil.rmtree(self.root / str(pid), ignore_errors=True)
        for pid in wanted.keys() - self._pids:
            process = wanted[pid]
            directory = self.root / str(pid)
            directory.mkdir(exist_ok=True)
            if process.cgroup:
                line, command = f"0::{process.cgroup}\n", process.command
            else:
                cid = container_id_for(process.pod_uid, process.container)
                line, command = cgroup_line(pod_uid=process.pod_uid, container_id=cid), process.container[:15]
            for name, text in (("comm", f"{command}\n"), ("cgroup", line)):  # cgroup last: the reader starts there
                tmp = directory / f"{name}.tmp"
                tmp.write_text(text, encoding="utf-8")
                os.replace(tmp, directory / name)
        self._pids = set(wanted)
