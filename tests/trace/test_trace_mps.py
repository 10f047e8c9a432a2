"""An MPS GPU end to end: clients listed by the MPS call are their pods', the server is infrastructure, and a trace
keeps both the process modes and the server's PID, so a replay never blames it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from watchdog.attribution.proc import ProcReader
from watchdog.config import Policy
from watchdog.evaluation import replay, simulate
from watchdog.testbed import SimulatedGpuNode
from watchdog.testbed.cluster.proc_tree import ProcTree
from watchdog.testbed.mps import MPS_SERVER_COMM
from watchdog.trace import TraceHeader, TraceWriter, read_trace

GIB = 1 << 30
SCENARIO = {
    "name": "mps-two-tenants", "seed": 5, "duration_ticks": 12,
    "gpus": [{"model": "H100-80GB-HBM3", "mps": True, "scheduler": "proportional"}],
    "pods": [
        {"namespace": "team-a", "name": "train", "device": {"gpu": 0},
         "workload": {"memory": {"base": "6Gi"}, "sm": {"base": 0.4}}},
        {"namespace": "team-b", "name": "infer", "device": {"gpu": 0},
         "workload": {"memory": {"base": "3Gi"}, "sm": {"base": 0.3}}},
    ],
}


@pytest.fixture(scope="module")
def ticks() -> list:
    return list(simulate(SCENARIO))


def test_clients_are_their_pods_and_the_server_is_infrastructure(ticks: list) -> None:
    sample, attribution = ticks[-1]
    by_pid = {p.pid: p for p in sample.gpus[0].processes}
    [server] = attribution.infrastructure
    assert by_pid[server].mode == "compute"
    assert {attribution.processes[p].key: by_pid[p].mode for p in by_pid if p != server} == {
        "team-a/train": "mps", "team-b/infer": "mps"}
    assert server not in attribution.processes and server not in attribution.host_processes
    usage = attribution.usage(sample)[sample.gpus[0].uuid]
    assert sorted(u.memory_bytes for u in usage) == [3 * GIB, 6 * GIB]  # the server is nobody's use


def test_a_trace_keeps_modes_and_infrastructure_and_replays_without_blaming_the_server(
    tmp_path: Path, ticks: list
) -> None:
    path = tmp_path / "mps.jsonl"
    with TraceWriter(path, header=TraceHeader(node="sim-node-1", tick_seconds=1.0, started=0.0, version=2)) as writer:
        for sample, attribution in ticks:
            writer.write(sample, attribution)
    records = list(read_trace(path))
    assert [r.sample.gpus[0].processes for r in records] == [s.gpus[0].processes for s, _ in ticks]
    assert [r.attribution.infrastructure for r in records] == [a.infrastructure for _, a in ticks]
    [server] = ticks[-1][1].infrastructure
    findings = replay(path, policy=Policy())["findings"]
    assert not [f for f in findings if f["culprit"] and str(server) in json.dumps(f)]
    assert not [f for f in findings if f["kind"] in ("unauthorized", "unauthorized_host")]


def test_an_old_process_line_without_mode_reads_as_compute() -> None:
    from watchdog.trace.codec import _decode_process

    assert _decode_process({"pid": 4, "used_memory_bytes": 1}).mode == "compute"


def test_the_proc_reader_knows_the_server_by_its_truncated_comm(tmp_path: Path) -> None:
    node = SimulatedGpuNode.from_scenario(SCENARIO)
    try:
        rows = node.processes(1)
        ProcTree(tmp_path).sync(rows)
        reader = ProcReader(str(tmp_path))
        found = reader.read([row.pid for row in rows])
        server = node.mps_server(0, 1)
        assert (tmp_path / str(server) / "comm").read_text() == f"{MPS_SERVER_COMM}\n"
        assert reader.infrastructure == {server}
        assert server not in reader.hosts and len(found) == 3  # the server's cgroup names the daemon's pod
    finally:
        node.close()
