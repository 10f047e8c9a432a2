"""What a node must give the agent before attribution can work, as ``gpu-watchdog probe`` checks it first.

Attribution rests on two things a pod spec can get wrong without any error at start: the kubelet's PodResources
socket (which pod was given which device) and a /proc that shows the host's processes (which pod a PID NVML reports
runs in, from its cgroup). Wrong, the agent runs and samples, but names no pod. So ``read_host`` reads what the
checks need once (the only I/O here; every path is a parameter) and the ``check_*`` functions, pure, turn that into
one line each.

How "host PIDs" is decided: NVML reports processes by their PID in the host's (initial) PID namespace, so
``proc_root`` must show that namespace. Kernel threads live only there, and PID 2 is always the kernel thread
daemon ``kthreadd`` (init/main.c: rest_init starts it right after PID 1), so ``<proc_root>/2/comm`` reading
``kthreadd`` is the test. A container's own /proc (no hostPID, no host /proc mounted) has no PID 2 of that name:
its PID 1 is the container's entrypoint and kernel threads are not visible in a child namespace.
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from dataclasses import dataclass

from watchdog.attribution.cgroups import cgroup_path, parse_cgroup
from watchdog.model.prerequisites import Prerequisite

MAX_CGROUP_READS = 4096  # enough to find pods on a busy node; bounds the probe's time on a huge one
_KTHREADD = "kthreadd"


@dataclass(frozen=True, slots=True)
class HostView:
    """What ``read_host`` found; tests build it directly."""

    kubelet_socket: str
    socket_state: str  # "socket", "absent", "no directory", "not a socket (<kind>)", "unreadable (<reason>)"
    proc_root: str
    proc_pids: int | None  # numeric entries in proc_root; None: proc_root unreadable
    pid2_comm: str | None  # None: no PID 2 visible
    cgroups: tuple[str, ...] = ()  # texts of <proc_root>/<pid>/cgroup, up to MAX_CGROUP_READS


def read_host(*, kubelet_socket: str, proc_root: str, max_cgroups: int = MAX_CGROUP_READS) -> HostView:
    """Stat the socket, list proc_root, read PID 2's comm and the cgroup files of up to ``max_cgroups`` PIDs spread
    evenly over all of them."""
    try:
        pids = sorted(int(name) for name in os.listdir(proc_root) if name.isdigit())
    except OSError:
        pids = None
    texts = []
    stride = -(-len(pids or ()) // max_cgroups) or 1  # spread over all PIDs: pods rarely hold the lowest ones
    for pid in (pids or [])[::stride][:max_cgroups]:
        text = _read(os.path.join(proc_root, str(pid), "cgroup"))
        if text:
            texts.append(text)
    comm = _read(os.path.join(proc_root, "2", "comm"))
    return HostView(kubelet_socket=kubelet_socket, socket_state=_socket_state(kubelet_socket), proc_root=proc_root,
                    proc_pids=None if pids is None else len(pids), pid2_comm=None if comm is None else comm.strip(),
                    cgroups=tuple(texts))


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:  # a process that ended, or one hidden from us: the checks count what they got
        return None


def _socket_state(path: str) -> str:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "absent" if os.path.isdir(os.path.dirname(path) or ".") else "no directory"
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    if stat.S_ISSOCK(mode):
        return "socket"
    kind = "directory" if stat.S_ISDIR(mode) else "regular file" if stat.S_ISREG(mode) else "other file"
    return f"not a socket ({kind})"


def check_kubelet_socket(view: HostView) -> Prerequisite:
    title = "kubelet pod-resources socket"
    path = view.kubelet_socket
    if view.socket_state == "socket":
        return Prerequisite("kubelet_socket", title, "ok", f"{path} is a socket")
    where = os.path.dirname(path)
    fix = (f"mount the host's {where} (hostPath, type Directory) and point attribution.kubelet_socket at the "
           "socket in it; without it no device is mapped to a pod")
    if view.socket_state == "no directory":
        return Prerequisite("kubelet_socket", title, "missing", f"{where} does not exist here", fix)
    return Prerequisite("kubelet_socket", title, "missing", f"{path}: {view.socket_state}", fix)


def check_host_pids(view: HostView) -> Prerequisite:
    title = "host PIDs (hostPID)"
    fix = ("mount the host's /proc read-only and set attribution.proc_root to it (the chart uses /host/proc), or "
           "run the pod with hostPID: true; NVML reports host PIDs")
    if view.proc_pids is None:
        return Prerequisite("host_pids", title, "missing", f"{view.proc_root} cannot be listed", fix)
    if view.pid2_comm == _KTHREADD:
        return Prerequisite("host_pids", title, "ok",
                            f"{view.proc_root} shows the host's PIDs ({view.proc_pids} processes; PID 2 is kthreadd)")
    seen = "no PID 2" if view.pid2_comm is None else f"PID 2 is {view.pid2_comm!r}"
    return Prerequisite("host_pids", title, "missing",
                        f"{view.proc_root} shows a container's PIDs only ({view.proc_pids} processes, {seen})", fix)


def cgroup_layout(texts: tuple[str, ...]) -> str:
    """"v2" (only ``0::`` lines), "v1" (no ``0::`` line), "hybrid" (both) or "unknown" (nothing read), man 7 cgroups."""
    unified = legacy = False
    for text in texts:
        for line in text.splitlines():
            fields = line.split(":", 2)
            if len(fields) != 3:
                continue
            if fields[0] == "0" and fields[1] == "":
                unified = True
            else:
                legacy = True
    if unified and legacy:
        return "hybrid"
    return "v2" if unified else "v1" if legacy else "unknown"


def check_cgroups(view: HostView) -> Prerequisite:
    title = "cgroups (pod of each PID)"
    layout = cgroup_layout(view.cgroups)
    names = {"v2": "v2 (unified)", "v1": "v1", "hybrid": "hybrid (v1 controllers, v2 unified)"}
    if layout == "unknown":
        return Prerequisite("cgroups", title, "missing", f"no readable <pid>/cgroup under {view.proc_root}",
                            "give the agent the host's /proc (see host PIDs)")
    in_pods = [path for path in (cgroup_path(text) for text in view.cgroups if parse_cgroup(text)) if path]
    if not in_pods:
        tops = Counter(top for top in (_top(cgroup_path(text)) for text in view.cgroups) if top).most_common(3)
        seen = ", ".join(top for top, _ in tops)
        return Prerequisite(
            "cgroups", title, "missing",
            f"{names[layout]}; none of {len(view.cgroups)} processes is in a kubepods cgroup (seen: {seen or '/'})",
            "run on a Kubernetes node with the host's /proc; if pods run here, their cgroup paths are a layout "
            "watchdog/attribution/cgroups.py does not parse: report one /proc/<pid>/cgroup")
    driver = "systemd driver" if any("kubepods.slice" in path or "kubepods-" in path for path in in_pods) \
        else "cgroupfs driver"
    return Prerequisite("cgroups", title, "ok",
                        f"{names[layout]}, {driver}; {len(in_pods)} of {len(view.cgroups)} processes in pods")


def _top(path: str) -> str:
    parts = [part for part in path.split("/") if part and part != ".."]
    return "/" + parts[0] if parts else ""


def host_prerequisites(view: HostView) -> list[Prerequisite]:
    """The host's lines, in the order an operator fixes them."""
    return [check_kubelet_socket(view), check_host_pids(view), check_cgroups(view)]
