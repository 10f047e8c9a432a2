"""Traces carry the cgroup path and command of processes in no pod, so a replay reports them as the agent did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from watchdog.config import Policy
from watchdog.evaluation import replay, simulate
from watchdog.model import HostProcess
from watchdog.trace import TraceHeader, TraceWriter, read_trace
from watchdog.trace.codec import decode_tick

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "host-process-mig.yaml"


@pytest.fixture(scope="module")
def ticks() -> list:
    return list(simulate(str(SCENARIO)))


def write(path: Path, ticks: list) -> Path:
    with TraceWriter(path, header=TraceHeader(node="sim-node-1", tick_seconds=1.0, started=0.0, version=2)) as writer:
        for sample, attribution in ticks:
            writer.write(sample, attribution)
    return path


def test_host_processes_round_trip_and_replay_to_the_same_finding(tmp_path: Path, ticks: list) -> None:
    path = write(tmp_path / "host.jsonl.gz", ticks)
    records = list(read_trace(path))
    assert [dict(r.attribution.host_processes) for r in records] == [dict(a.host_processes) for _, a in ticks]
    assert HostProcess(cgroup="/system.slice/nvidia-dcgm.service", command="nv-hostengine") in (
        records[0].attribution.host_processes.values())
    findings = [f for f in replay(path, policy=Policy())["findings"] if f["kind"] == "unauthorized_host"]
    assert [(f["evidence"]["command"], f["victims"], f["culprit"]) for f in findings] == [
        ("python3", ["prod/infer"], None)]
    assert findings[0]["evidence"]["cgroup"].startswith("/system.slice/docker-")


def test_a_hand_written_line_names_cgroup_and_command(tmp_path: Path) -> None:
    line = {"tick": 0, "timestamp": 0.0, "sample": {"node": "n1", "gpus": []},
            "attribution": {"healthy": True, "host_processes": {"4242": {"cgroup": "/user.slice", "command": "a.out"}}}}
    assert dict(decode_tick(line)[1].host_processes) == {4242: HostProcess("/user.slice", "a.out")}
    bad = {**line, "attribution": {"healthy": True, "host_processes": {"4242": {"command": "a.out"}}}}
    path = write(tmp_path / "bad.jsonl", [])
    path.write_text(path.read_text() + json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match="host_processes"):
        list(read_trace(path))
