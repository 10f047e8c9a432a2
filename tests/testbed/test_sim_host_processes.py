"""Processes in no pod in the simulator: the scenario format, NVML's view and the /proc tree the agent reads."""

from __future__ import annotations

import pytest

from watchdog.attribution.proc import ProcReader
from watchdog.model import HostProcess
from watchdog.testbed.cluster.proc_tree import ProcTree
from watchdog.testbed.gpu_node import SimulatedGpuNode
from watchdog.testbed.scenario import ScenarioError, load_scenario

DOCKER = "/system.slice/docker-0123abcd.scope"


def scenario(**host):
    return {
        "name": "host", "seed": 3, "duration_ticks": 20,
        "gpus": [{"model": "H100-80GB-HBM3", "mig": ["3g.40gb", "2g.20gb"]}],
        "pods": [{"namespace": "prod", "name": "infer", "device": {"gpu": 0, "instance": 0},
                  "workload": {"memory": {"base": "4Gi"}}}],
        "host_processes": [{"command": "python3", "cgroup": DOCKER, "device": {"gpu": 0, "instance": 0},
                            "start_tick": 5, "workload": {"memory": {"base": "2Gi"}}, **host}],
    }


def test_nvml_reports_the_host_process_and_the_proc_tree_places_it_in_no_pod(tmp_path):
    node = SimulatedGpuNode.from_scenario(scenario())
    try:
        assert [p.pod for p in node.processes(4)] == ["infer"]
        rows = node.processes(5)
        [host] = [row for row in rows if row.cgroup]
        assert (host.command, host.cgroup, host.pod_uid) == ("python3", DOCKER, "")
        assert host.device_uuid == next(row for row in rows if row.pod == "infer").device_uuid
        tree = ProcTree(tmp_path)
        tree.sync(rows)
        reader = ProcReader(str(tmp_path))
        assert set(reader.read([row.pid for row in rows])) == {next(r.pid for r in rows if r.pod == "infer")}
        assert reader.hosts == {host.pid: HostProcess(cgroup=DOCKER, command="python3")}
        assert (tmp_path / str(host.pid) / "comm").read_text() == "python3\n"
    finally:
        node.close()


@pytest.mark.parametrize(("override", "field"), [
    ({"command": "a-command-longer-than-15"}, "command"),
    ({"cgroup": "system.slice/x.scope"}, "cgroup"),
    ({"device": {"gpu": 0, "instance": 5}}, "host_processes.0.device"),
    ({"start_tick": 9, "end_tick": 9}, "host_processes.0.end_tick"),
])
def test_a_bad_host_process_is_an_error_naming_the_field(override, field):
    with pytest.raises(ScenarioError, match=field):
        load_scenario(scenario(**override))


def test_host_pids_are_unique_on_the_node():
    loaded = load_scenario(scenario())
    assert loaded.host_processes[0].pid not in {pod.pid for pod in loaded.pods}
    assert load_scenario(scenario()).host_processes[0].pid == loaded.host_processes[0].pid  # derived from the seed


def test_a_kubelet_outage_makes_the_fake_kubelet_fail_for_its_ticks(tmp_path):
    from watchdog.testbed.world import SimulatedWorld

    world = SimulatedWorld({**scenario(), "kubelet_outages": [{"start_tick": 2, "end_tick": 4}]}, workdir=tmp_path)
    try:
        failing = []
        for _ in range(6):
            world.sync()
            failing.append(world.kubelet.rate_limit)
            world.advance(world.scenario.tick_seconds)
        assert failing == [False, False, True, True, False, False]
    finally:
        world.node.close()
