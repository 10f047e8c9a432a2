"""`gpu-watchdog whatif` for real: simulated nodes, each a production agent with its flight recorder and what-if
API (watchdog/testbed/fleet.py), asked by the command as a person runs it (a subprocess)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from watchdog.config import read_yaml
from watchdog.testbed import DEMO_SCENARIO
from watchdog.testbed.fleet import FleetBed, FleetNode

whatif = pytest.importorskip("watchdog.evaluation.whatif", reason="the agent's what-if replay is not built yet")
TICKS = 180  # three minutes of each node, recorded at speed


def candidate(path: Path) -> Path:
    """The demo's policy in force, switched to enforce and acting sooner."""
    policy = read_yaml(DEMO_SCENARIO)["policy"]
    action = policy.setdefault("action", {})
    action["mode"] = "enforce"
    for kind in ("quota", "interference", "unauthorized"):
        action.setdefault(kind, {})["for_seconds"] = 5
    path.write_text(yaml.safe_dump(policy))
    return path


async def gpu_watchdog(*argv: str, timeout: float = 240.0) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "watchdog.cli", *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "KUBECONFIG": "/nonexistent"})
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    return process.returncode or 0, out.decode(), err.decode()


def ask(bed: FleetBed, policy: Path, *extra: str) -> list[str]:
    return ["whatif", "--policy", str(policy), "--kubeconfig", str(bed.kubeconfig), "--token-file",
            str(bed.token_file), "--poll-seconds", "0.2", *extra]


async def test_each_nodes_differences_are_those_of_replay_compare_on_its_segments(tmp_path):
    policy = candidate(tmp_path / "candidate.yaml")
    nodes = [FleetNode("gpu-a"), FleetNode("gpu-b"), FleetNode("gpu-c"), FleetNode("gpu-down", kind="down")]
    async with FleetBed(nodes, workdir=tmp_path / "bed", ticks=TICKS, whatif_worker=whatif.run_whatif) as bed:
        code, out, err = await gpu_watchdog(*ask(bed, policy, "--output", "json"))
        assert code == 1, err  # one node is down
        report = json.loads(out)
        answered = {row["node"]: row for row in report["nodes"] if row["state"] == "done"}
        assert sorted(answered) == ["gpu-a", "gpu-b", "gpu-c"], report["failed"]
        changed = 0
        for node, row in answered.items():
            code, by_hand, err = await gpu_watchdog("replay", str(bed.flight(node)), "--compare", str(policy),
                                                    "--report", "json")
            assert code == 0, err
            expected = json.loads(by_hand)
            assert row["answer"]["result"]["diff"] == expected["diff"], node
            assert row["answer"]["result"]["b"]["evictions"] == expected["b"]["evictions"], node
            changed += sum(len(part) for section in expected["diff"].values() for part in section.values())
        assert changed > 0  # the candidate does change something, so the comparison compares something
        totals = report["totals"]["evictions"]
        assert totals["only_b"] == sum(len(row["answer"]["result"]["diff"]["evictions"]["only_b"])
                                       for row in answered.values())
        (down,) = report["failed"]
        assert down["node"] == "gpu-down" and down["state"] == "unreachable"


async def test_a_slow_node_is_listed_as_timed_out(tmp_path):
    policy = candidate(tmp_path / "candidate.yaml")
    nodes = [FleetNode("gpu-slow", kind="slow", delay=60.0)]  # holds every connection a minute
    async with FleetBed(nodes, workdir=tmp_path / "bed", ticks=20, whatif_worker=whatif.run_whatif) as bed:
        code, out, err = await gpu_watchdog(*ask(bed, policy, "--output", "json", "--timeout", "2"))
    assert code == 1, err
    (row,) = json.loads(out)["failed"]
    assert (row["node"], row["state"]) == ("gpu-slow", "timeout")
    assert row["reason"] == "no final answer within 2 s, no answer to the POST"


async def test_an_empty_recorder_is_listed_as_no_data_and_the_text_report_says_so(tmp_path):
    policy = candidate(tmp_path / "candidate.yaml")
    nodes = [FleetNode("gpu-a"), FleetNode("gpu-empty", kind="empty")]
    async with FleetBed(nodes, workdir=tmp_path / "bed", ticks=20, whatif_worker=whatif.run_whatif) as bed:
        code, out, err = await gpu_watchdog(*ask(bed, policy, "--output", "text"))
    assert code == 1, err
    lines = out.splitlines()
    assert lines[0].endswith("on 2 nodes: 1 with a result, 1 failed")
    failed = lines[lines.index("failed nodes: 1") + 1].split(maxsplit=3)
    assert failed[0] == "gpu-empty" and failed[2] == "no_data"
    assert "== node gpu-a (" in out and "A = " in out and f"B = {policy}" in out
