"""Processes in no pod: the /proc reader keeps their cgroup path and command, the join hands them on."""

from __future__ import annotations

import pytest

from watchdog.attribution.cgroups import cgroup_path
from watchdog.attribution.join import attribute
from watchdog.attribution.proc import ProcReader
from watchdog.model import GpuSample, HostProcess, NodeSample, PodIndex, ProcessSample

POD_CGROUP = ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_0000_1111_2222_333344445555"
              ".slice/cri-containerd-" + "ab" * 32 + ".scope")
DOCKER = "/system.slice/docker-" + "cd" * 32 + ".scope"


def write_proc(root, pid: int, cgroup: str, comm: str | None) -> None:
    (root / str(pid)).mkdir(parents=True, exist_ok=True)
    (root / str(pid) / "cgroup").write_text(cgroup + "\n")
    if comm is not None:
        (root / str(pid) / "comm").write_text(comm + "\n")


@pytest.mark.parametrize(("text", "path"), [
    ("0::/system.slice/nvidia-dcgm.service", "/system.slice/nvidia-dcgm.service"),
    ("12:memory:/user.slice/session-3.scope\n4:cpu,cpuacct:/user.slice\n", "/user.slice/session-3.scope"),
    ("1:name=systemd:/init.scope\n0::" + DOCKER + "\n", DOCKER),  # hybrid v1/v2: the unified line wins
    ("garbage\n", ""),
])
def test_cgroup_path_is_the_v2_line_else_the_first_v1_line(text, path):
    assert cgroup_path(text) == path


def test_reader_keeps_cgroup_and_command_of_processes_in_no_pod(tmp_path):
    write_proc(tmp_path, 100, POD_CGROUP, "python")
    write_proc(tmp_path, 200, "0::" + DOCKER, "xmrig")
    reader = ProcReader(str(tmp_path))
    assert set(reader.read([100, 200])) == {100}
    assert reader.hosts == {200: HostProcess(cgroup=DOCKER, command="xmrig")}
    reader.read([100, 200])
    assert reader.counters["reads"] == 2 and reader.counters["cache_hits"] == 2  # comm is read once, with cgroup
    reader.read([100])
    assert reader.hosts == {}  # no longer reported by NVML: forgotten, a recycled PID is read afresh


def test_an_unreadable_comm_is_counted_and_leaves_the_command_empty(tmp_path):
    write_proc(tmp_path, 300, "0::" + DOCKER, None)
    reader = ProcReader(str(tmp_path))
    reader.read([300])
    assert reader.hosts == {300: HostProcess(cgroup=DOCKER, command="")}
    assert reader.counters["vanished"] == 1


def test_a_denied_cgroup_is_not_a_process_in_no_pod(tmp_path):
    def read_text(path: str) -> str:
        raise PermissionError(path)

    reader = ProcReader(str(tmp_path), read_text=read_text)
    assert reader.read([400]) == {} and reader.hosts == {}
    assert reader.counters["denied"] == 1


def test_join_hands_on_only_reported_pids_that_are_in_no_pod():
    gpu = GpuSample(index=0, uuid="GPU-0", name="g", processes=(ProcessSample(7, 1), ProcessSample(8, 1)))
    sample = NodeSample(node="n1", tick=0, timestamp=0.0, gpus=(gpu,))
    hosts = {7: HostProcess(DOCKER, "xmrig"), 9: HostProcess("/init.scope", "init")}  # 9: not reported by NVML
    attribution = attribute(sample, assignments=(), index=PodIndex(), proc={}, kubelet_ok=True, api_ok=True,
                            hosts=hosts)
    assert dict(attribution.host_processes) == {7: HostProcess(DOCKER, "xmrig")}
