"""`gpu-watchdog demo --nodes N --failing`, as docs/flight-recorder.md tells a person to try the fleet what-if:
the commands its banner prints work, every failing kind is listed as such, and Ctrl-C leaves nothing behind."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import sys
from pathlib import Path

import pytest

from tests.fleet.test_whatif_fleet_bed import candidate

pytest.importorskip("watchdog.evaluation.whatif", reason="the agent's what-if replay is not built yet")


async def test_the_banner_s_whatif_command_lists_each_failing_node_and_ctrl_c_cleans_up(tmp_path):
    policy = candidate(tmp_path / "candidate.yaml")
    env = {**os.environ, "KUBECONFIG": "/nonexistent"}
    demo = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "watchdog.cli", "demo", "--nodes", "2", "--failing", "--ticks", "60",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env)
    try:
        banner = []
        while not banner or banner[-1] != "Ctrl-C ends it.":
            line = await asyncio.wait_for(demo.stdout.readline(), 180)
            assert line, "the demo ended before its banner"
            banner.append(line.decode().rstrip("\n"))
        [command] = [line.strip() for line in banner if line.strip().startswith("gpu-watchdog whatif")]
        argv = [arg if arg != "P" else str(policy) for arg in shlex.split(command)[1:]]
        whatif = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "watchdog.cli", *argv, "--output", "json", "--timeout", "10",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
        out, err = await asyncio.wait_for(whatif.communicate(), 120)
        assert whatif.returncode == 1, err.decode()
        states = {row["node"]: row["state"] for row in json.loads(out)["nodes"]}
        assert states == {"sim-node-1": "done", "sim-node-2": "done", "sim-node-down": "unreachable",
                          "sim-node-slow": "timeout", "sim-node-empty": "no_data"}
        workdir = Path(argv[argv.index("--kubeconfig") + 1]).parent
        assert workdir.is_dir()
    finally:
        if demo.returncode is None:
            demo.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(demo.wait(), 60)
    assert code == 0
    assert not workdir.exists()
