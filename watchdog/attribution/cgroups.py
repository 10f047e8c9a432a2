"""Process → (pod UID, container ID), from ``/proc/<pid>/cgroup``: the only way to split a shared GPU between pods.

The kubelet only says which pods were *given* a device; on a time-sliced or MPS GPU several pods share one UUID and
NVML reports bare PIDs. The kubelet places every container in a cgroup whose path names the pod UID and the runtime's
container ID, so one small file per PID answers "whose process is this". This module is the pure parser of such a
file; ``watchdog.attribution.proc`` reads them.

Layouts handled (kubelet pkg/kubelet/cm/cgroup_manager_linux.go names the pod cgroup; the runtime names the leaf):

- cgroupfs driver, v1 or v2: ``/kubepods[/burstable|/besteffort]/pod<uid>/<container-id>``
- systemd driver: ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/
  <runtime>-<container-id>.scope`` where systemd escapes ``-`` in the UID as ``_`` and the runtime prefix is
  ``cri-containerd-`` (containerd), ``crio-`` (CRI-O) or ``docker-`` (dockershim/cri-dockerd)
- kind/k3s/nested: the same paths below an outer prefix (``/kubelet.slice/kubelet-kubepods.slice/…``,
  ``/docker/<outer>/kubepods/…``) or relative to a cgroup namespace (``/../../kubepods…``)
- static pods, whose kubelet UID is a 32-hex config hash rather than a UUID
- everything else (``/system.slice/…``, ``/user.slice/…``, a bare ``/docker/<id>``): not a pod → ``None``
"""

from __future__ import annotations

import re

# "pod<uid>" as a cgroupfs directory, or "<parent>-pod<uid>.slice" as a systemd slice (UID dashes escaped to "_").
_POD_SEGMENT = re.compile(
    r"(?:^|-)pod("
    r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"  # API-server pods: a UUID
    r"|[0-9a-f]{32}"  # static pods: the kubelet's config hash (pkg/kubelet/config/common.go)
    r")(?:\.slice)?$"
)
# CRI-O's conmon monitor lives in "crio-conmon-<id>.scope": it is not the container, so the prefix list omits it
# and the hex check rejects it.
_CONTAINER_SEGMENT = re.compile(r"^(?:cri-containerd-|crio-|docker-|cri-dockerd-)?([0-9a-f]{12,64})(?:\.scope)?$")

PodProcess = tuple[str, str | None]
"""(pod UID, container ID or None when the process sits in the pod's own cgroup, e.g. the sandbox)."""


def parse_cgroup_path(path: str) -> PodProcess | None:
    """One cgroup path → (pod UID, container ID), or None when no pod is named in it.

    The innermost pod segment wins (a kind node is itself a container, but its outer path names no pod).
    """
    parts = path.split("/")
    for index in range(len(parts) - 1, -1, -1):
        pod = _POD_SEGMENT.search(parts[index])
        if pod is None:
            continue
        uid = pod.group(1).replace("_", "-")
        container = None
        if index + 1 < len(parts):
            leaf = _CONTAINER_SEGMENT.match(parts[index + 1])
            container = leaf.group(1) if leaf else None
        return uid, container
    return None


def parse_cgroup(text: str) -> PodProcess | None:
    """The text of ``/proc/<pid>/cgroup`` → (pod UID, container ID), or None for a process outside any pod.

    Each line is ``hierarchy-ID:controllers:path`` (man 7 cgroups); v2 has the single line ``0::path``, v1 one line
    per hierarchy. A line naming the container beats one naming only the pod (some v1 controllers, e.g. ``rdma`` or
    ``misc`` on older runtimes, stop at the pod level).
    """
    pod_only: PodProcess | None = None
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        found = parse_cgroup_path(fields[2].strip())
        if found is None:
            continue
        if found[1] is not None:
            return found
        pod_only = pod_only or found
    return pod_only


def cgroup_path(text: str) -> str:
    """The process's cgroup path from the text of ``/proc/<pid>/cgroup``: the v2 line's (``0::path``), else the first
    v1 line's, else "" (a process outside any pod is reported by this path, so an operator can find its unit or
    container: ``/system.slice/docker-<id>.scope``, ``/user.slice/…``)."""
    first = ""
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        if fields[0] == "0" and fields[1] == "":
            return fields[2].strip()
        first = first or fields[2].strip()
    return first
