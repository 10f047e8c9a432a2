"""/proc/<pid>/cgroup → (pod UID, container ID) for every runtime/driver/nesting layout, and the cached reader."""

from __future__ import annotations

import pytest

from watchdog.attribution.cgroups import parse_cgroup
from watchdog.attribution.proc import ProcReader

UID = "1f2e3d4c-5b6a-4789-8abc-def012345678"
SYSTEMD_UID = UID.replace("-", "_")
CID = "4c8a1f" + "0" * 52 + "abcdef"  # 64 hex, as containerd/CRI-O/Docker name containers
STATIC_HASH = "6a1b2c3d4e5f60718293a4b5c6d7e8f9"

LAYOUTS = [
    ("v2-systemd-containerd",
     f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope",
     (UID, CID)),
    ("v2-systemd-guaranteed-crio",
     f"0::/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice/crio-{CID}.scope",
     (UID, CID)),
    ("v2-systemd-besteffort-docker",
     f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SYSTEMD_UID}.slice/docker-{CID}.scope",
     (UID, CID)),
    ("v2-cgroupfs-containerd", f"0::/kubepods/burstable/pod{UID}/{CID}", (UID, CID)),
    ("v2-cgroupfs-guaranteed", f"0::/kubepods/pod{UID}/{CID}", (UID, CID)),
    ("v1-cgroupfs-containerd",
     "\n".join(
         [
             f"12:memory:/kubepods/burstable/pod{UID}/{CID}",
             f"11:devices:/kubepods/burstable/pod{UID}/{CID}",
             f"3:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}",
             f"1:name=systemd:/kubepods/burstable/pod{UID}/{CID}",
         ]
     ),
     (UID, CID)),
    ("v1-systemd-crio-with-pod-level-controller",
     "\n".join(
         [
             f"13:misc:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice",
             f"5:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/crio-{CID}.scope",
             "0::/",
         ]
     ),
     (UID, CID)),
    ("kind-nested-systemd",
     "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
     f"kubelet-kubepods-besteffort-pod{SYSTEMD_UID}.slice/cri-containerd-{CID}.scope",
     (UID, CID)),
    ("kind-under-outer-docker-cgroupfs",
     f"0::/docker/{'e' * 64}/kubepods/besteffort/pod{UID}/{CID}",
     (UID, CID)),
    ("k3s-cgroupns-relative", f"0::/../../kubepods/burstable/pod{UID}/{CID}", (UID, CID)),
    ("static-pod-config-hash", f"0::/kubepods/burstable/pod{STATIC_HASH}/{CID}", (STATIC_HASH, CID)),
    ("pod-sandbox-level-only", f"0::/kubepods/burstable/pod{UID}", (UID, None)),
    ("crio-conmon-is-not-the-container",
     f"0::/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice/crio-conmon-{CID}.scope",
     (UID, None)),
    ("short-docker-id", f"0::/kubepods/burstable/pod{UID}/{CID[:12]}", (UID, CID[:12])),
    ("host-service", "0::/system.slice/nvidia-persistenced.service", None),
    ("user-session", "0::/user.slice/user-1000.slice/session-3.scope", None),
    ("plain-docker-container", f"0::/docker/{CID}", None),
    ("plain-docker-systemd-scope", f"0::/system.slice/docker-{CID}.scope", None),
    ("init", "0::/init.scope", None),
    ("v1-host-process",
     "12:memory:/system.slice/sshd.service\n1:name=systemd:/system.slice/sshd.service", None),
    ("empty-and-garbage", "\nnot a cgroup line\n", None),
]


@pytest.mark.parametrize(("text", "expected"), [(text, want) for _, text, want in LAYOUTS],
                         ids=[name for name, _, _ in LAYOUTS])
def test_parse_cgroup_layouts(text, expected):
    assert parse_cgroup(text) == expected


def test_the_word_kubepods_alone_is_not_a_pod():
    assert parse_cgroup("0::/kubepods.slice/kubepods-burstable.slice") is None


def write_proc(root, pid: int, text: str) -> None:
    (root / str(pid)).mkdir(parents=True, exist_ok=True)
    (root / str(pid) / "cgroup").write_text(text + "\n")


def test_reader_maps_pod_processes_and_leaves_out_host_ones(tmp_path):
    write_proc(tmp_path, 100, LAYOUTS[0][1])
    write_proc(tmp_path, 200, "0::/system.slice/sshd.service")
    reader = ProcReader(str(tmp_path))
    assert reader.read([100, 200]) == {100: (UID, CID)}


def test_reader_caches_by_pid_including_non_pod_answers(tmp_path):
    write_proc(tmp_path, 100, LAYOUTS[0][1])
    write_proc(tmp_path, 200, "0::/init.scope")
    reader = ProcReader(str(tmp_path))
    reader.read([100, 200])
    write_proc(tmp_path, 100, "0::/init.scope")  # a process cannot change pods: the cached answer stands
    assert reader.read([100, 200]) == {100: (UID, CID)}
    assert reader.counters["reads"] == 2
    assert reader.counters["cache_hits"] == 2


def test_reader_forgets_a_pid_once_it_is_no_longer_reported(tmp_path):
    write_proc(tmp_path, 100, LAYOUTS[0][1])
    reader = ProcReader(str(tmp_path))
    assert reader.read([100]) == {100: (UID, CID)}
    assert reader.read([]) == {}
    other = "b" * 64
    write_proc(tmp_path, 100, f"0::/kubepods/pod{UID}/{other}")  # the PID was recycled by another container
    assert reader.read([100]) == {100: (UID, other)}
    assert reader.counters["reads"] == 2


def test_reader_skips_vanished_processes_and_retries_them(tmp_path):
    reader = ProcReader(str(tmp_path))
    assert reader.read([4242]) == {}
    assert reader.counters["vanished"] == 1
    write_proc(tmp_path, 4242, LAYOUTS[3][1])
    assert reader.read([4242]) == {4242: (UID, CID)}


def test_reader_counts_permission_errors_once_and_skips(tmp_path):
    write_proc(tmp_path, 100, LAYOUTS[0][1])

    def read_text(path: str) -> str:
        if path.endswith("/7/cgroup"):
            raise PermissionError(13, "Permission denied", path)
        with open(path) as handle:
            return handle.read()

    reader = ProcReader(str(tmp_path), read_text=read_text)
    for _ in range(3):
        assert reader.read([7, 100]) == {100: (UID, CID)}
    assert reader.counters["denied"] == 1


def test_reader_counts_other_os_errors(tmp_path):
    (tmp_path / "9" / "cgroup").mkdir(parents=True)  # a directory where a file should be
    reader = ProcReader(str(tmp_path))
    assert reader.read([9]) == {}
    assert reader.counters["errors"] == 1


@pytest.mark.parametrize("bad", [0, -1, "12", True, 1.5])
def test_reader_rejects_things_that_are_not_pids(tmp_path, bad):
    with pytest.raises(ValueError, match="not a process id"):
        ProcReader(str(tmp_path)).read([bad])


def test_reader_over_a_fixture_tree_with_every_layout(tmp_path):
    for pid, (_, text, _) in enumerate(LAYOUTS, start=300):
        write_proc(tmp_path, pid, text)
    expected = {pid: want for pid, (_, _, want) in enumerate(LAYOUTS, start=300) if want is not None}
    reader = ProcReader(str(tmp_path) + "/")
    assert reader.read(range(300, 300 + len(LAYOUTS))) == expected
    assert reader.counters["reads"] == len(LAYOUTS)
