"""The host's prerequisites `gpu-watchdog probe` checks first: kubelet socket, host PIDs, cgroup layout.

Each check is read from fixture trees under tmp_path (a real unix socket, a /proc with or without kthreadd, v1, v2
and hybrid cgroup files), then judged by the pure functions.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from watchdog.attribution.node_checks import (HostView, cgroup_layout, check_cgroups, check_host_pids,
                                              check_kubelet_socket, host_prerequisites, read_host)

POD_UID = "7d3c2f1e-1111-4a2b-9c3d-0123456789ab"
CONTAINER = "a" * 64
SYSTEMD_V2 = (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_UID.replace('-', '_')}.slice/"
              f"cri-containerd-{CONTAINER}.scope\n")
CGROUPFS_V1 = "".join(f"{number}:{controller}:/kubepods/besteffort/pod{POD_UID}/{CONTAINER}\n"
                      for number, controller in ((12, "memory"), (11, "cpu,cpuacct"), (3, "pids")))
HYBRID = CGROUPFS_V1 + f"0::/kubepods/besteffort/pod{POD_UID}/{CONTAINER}\n"


def make_proc(root: Path, processes: dict[int, tuple[str, str]]) -> Path:
    """A /proc with <pid>/comm and <pid>/cgroup per process, plus the files that are not processes."""
    for pid, (comm, cgroup) in processes.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "comm").write_text(comm + "\n")
        (root / str(pid) / "cgroup").write_text(cgroup)
    (root / "self").mkdir(exist_ok=True)  # not a PID: never counted
    (root / "meminfo").write_text("MemTotal: 1 kB\n")
    return root


def host_proc(root: Path, workload: str = SYSTEMD_V2) -> Path:
    return make_proc(root, {1: ("systemd", "0::/init.scope\n"), 2: ("kthreadd", "0::/\n"),
                            900: ("containerd", "0::/system.slice/containerd.service\n"), 4242: ("python", workload)})


@pytest.fixture
def kubelet_socket(tmp_path: Path):
    path = tmp_path / "pod-resources" / "kubelet.sock"
    path.parent.mkdir()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    yield path
    server.close()


def test_a_node_with_everything_reads_ok(tmp_path: Path, kubelet_socket: Path) -> None:
    view = read_host(kubelet_socket=str(kubelet_socket), proc_root=str(host_proc(tmp_path / "proc")))

    assert view.proc_pids == 4 and view.pid2_comm == "kthreadd" and len(view.cgroups) == 4
    lines = host_prerequisites(view)
    assert [line.check for line in lines] == ["kubelet_socket", "host_pids", "cgroups"]
    assert [line.status for line in lines] == ["ok", "ok", "ok"]
    assert lines[2].detail == "v2 (unified), systemd driver; 1 of 4 processes in pods"


def test_socket_absent_missing_directory_and_a_file_in_its_place(tmp_path: Path) -> None:
    (tmp_path / "pod-resources").mkdir()
    (tmp_path / "pod-resources" / "regular.sock").write_text("")
    proc = str(host_proc(tmp_path / "proc"))
    cases = {
        tmp_path / "pod-resources" / "kubelet.sock": "kubelet.sock: absent",
        tmp_path / "not-mounted" / "kubelet.sock": "not-mounted does not exist here",
        tmp_path / "pod-resources" / "regular.sock": "regular.sock: not a socket (regular file)",
    }
    for path, detail in cases.items():
        line = check_kubelet_socket(read_host(kubelet_socket=str(path), proc_root=proc))
        assert line.status == "missing" and line.detail.endswith(detail)
        assert "attribution.kubelet_socket" in line.fix


def test_a_containers_own_proc_has_no_host_pids(tmp_path: Path, kubelet_socket: Path) -> None:
    # No hostPID and no host /proc: PID 1 is the entrypoint, and kernel threads are not visible.
    proc = make_proc(tmp_path / "proc", {1: ("gpu-watchdog", "0::/\n"), 7: ("sh", "0::/\n")})

    line = check_host_pids(read_host(kubelet_socket=str(kubelet_socket), proc_root=str(proc)))

    assert line.status == "missing"
    assert "container's PIDs only (2 processes, no PID 2)" in line.detail
    assert "hostPID: true" in line.fix and "attribution.proc_root" in line.fix
    unreadable = check_host_pids(read_host(kubelet_socket=str(kubelet_socket), proc_root=str(tmp_path / "none")))
    assert unreadable.status == "missing" and "cannot be listed" in unreadable.detail


@pytest.mark.parametrize(("workload", "layout", "detail"), [
    (SYSTEMD_V2, "v2", "v2 (unified), systemd driver"),
    (CGROUPFS_V1, "v1", "v1, cgroupfs driver"),
    (HYBRID, "hybrid", "hybrid (v1 controllers, v2 unified), cgroupfs driver"),
])
def test_cgroup_layouts_v1_v2_and_hybrid_with_pods(tmp_path: Path, workload: str, layout: str, detail: str) -> None:
    texts = (workload,)

    assert cgroup_layout(texts) == layout
    line = check_cgroups(HostView("s", "socket", "/proc", 1, "kthreadd", texts))
    assert line.status == "ok" and line.detail.startswith(detail)


def test_no_kubepods_cgroup_is_missing_and_names_what_was_seen(tmp_path: Path) -> None:
    proc = host_proc(tmp_path / "proc", workload="0::/user.slice/user-1000.slice/session-3.scope\n")

    line = check_cgroups(read_host(kubelet_socket="/nonexistent", proc_root=str(proc)))

    assert line.status == "missing"
    assert "none of 4 processes is in a kubepods cgroup" in line.detail
    assert "/system.slice" in line.detail and "/user.slice" in line.detail
    nothing = check_cgroups(HostView("s", "socket", "/proc", None, None, ()))
    assert nothing.status == "missing" and cgroup_layout(()) == "unknown"


def test_reads_are_bounded(tmp_path: Path) -> None:
    proc = make_proc(tmp_path / "proc", {pid: ("x", "0::/\n") for pid in range(1, 11)})

    (proc / "10" / "cgroup").write_text(SYSTEMD_V2)  # the newest process is a pod's

    view = read_host(kubelet_socket="/nonexistent", proc_root=str(proc), max_cgroups=4)

    assert view.proc_pids == 10 and len(view.cgroups) == 4  # PIDs 1, 4, 7, 10: spread, not the first four
    assert SYSTEMD_V2 in view.cgroups
