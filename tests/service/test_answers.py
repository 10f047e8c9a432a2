"""`gpu-watchdog explain NAMESPACE/POD` and `gpu-watchdog inventory` against the simulated world and its agent.

The CLI runs in a worker thread (it has its own event loop, as in a terminal) while the world, the fake API
server and the agent keep serving in the test's loop; it reaches them over real HTTP with a real kubeconfig.
"""

from __future__ import annotations

import asyncio
import json

from tests.service.conftest import SCENARIOS
from watchdog.cli import main
from watchdog.testbed import SimClock, SimulatedGpuNode


async def run_cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    status = await asyncio.to_thread(main, argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


async def demo_after(drive, ticks: int):
    driver = await drive(SCENARIOS / "demo.yaml", events=False)
    await driver.ticks(ticks)
    kubeconfig = driver.world.api.write_kubeconfig(driver.world.workdir / "kubeconfig", name="explain-test")
    return driver, str(kubeconfig), f"http://127.0.0.1:{driver.agent.port}"


async def test_explain_tells_the_story_of_a_dry_run_eviction(drive, capsys):
    driver, kubeconfig, agent = await demo_after(drive, 70)
    status, out, err = await run_cli(capsys, ["explain", "batch/scavenger-0", "--kubeconfig", kubeconfig,
                                              "--agent-url", agent])
    assert status == 0, err
    assert out.startswith("Pod batch/scavenger-0 (Running) on node sim-node-1, priority")
    assert "GPU devices the agent" in out and "MIG device MIG-" in out  # the instance it uses unassigned
    assert "culprit of a critical unauthorized finding" in out
    assert "dry_run for the quota finding (dry-run mode, HTTP 201)" in out
    assert "Events on the pod" in out  # the agent's Event about the dry-run eviction, read back from the API

    status, out, _ = await run_cli(capsys, ["explain", "ml-prod/ranker-1", "--kubeconfig", kubeconfig,
                                            "--agent-url", agent, "--json"])
    facts = json.loads(out)
    assert status == 0 and facts["node"] == "sim-node-1"
    assert any("victim" in finding["roles"] and finding["kind"] == "unauthorized" for finding in facts["findings"])


async def test_explain_without_the_agent_still_answers_from_the_cluster(drive, capsys):
    driver, kubeconfig, _ = await demo_after(drive, 2)
    status, out, _ = await run_cli(capsys, ["explain", "ml-prod/inference-0", "--kubeconfig", kubeconfig])
    assert status == 0
    assert "The node's agent could not be asked (no running gpu-watchdog agent pod on node sim-node-1" in out


async def test_explain_a_pod_that_does_not_exist_is_one_line(drive, capsys):
    driver, kubeconfig, agent = await demo_after(drive, 1)
    status, out, err = await run_cli(capsys, ["explain", "batch/nope", "--kubeconfig", kubeconfig,
                                              "--agent-url", agent])
    assert status == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("gpu-watchdog explain: not found in the cluster (") and "nope" in err


async def test_inventory_lists_every_instance_and_its_holder(drive, capsys):
    driver, _, agent = await demo_after(drive, 3)
    status, out, err = await run_cli(capsys, ["inventory", "--simulate", str(SCENARIOS / "demo.yaml"),
                                              "--agent-url", agent, "--json"])
    assert status == 0, err
    rows = json.loads(out)
    node = SimulatedGpuNode.from_scenario(SCENARIOS / "demo.yaml", SimClock())
    assert len(rows) == 4 + 3 + 1  # two MIG H100s (4 and 3 instances) and one whole A100
    by_profile = {(row["gpu"], row["profile"], row["gpu_instance"]): row for row in rows}
    assert by_profile[(0, "2g.20gb", 5)]["holders"] == ["ml-prod/inference-0"]
    assert [p["mode"] for p in by_profile[(0, "2g.20gb", 5)]["processes"]] == ["compute"]
    on_a100 = [pod for pod in node.scenario.pods if pod.device is not None and pod.device.gpu == 2 and pod.running(2)]
    assert sorted(by_profile[(2, "", None)]["holders"]) == sorted(f"{pod.namespace}/{pod.name}" for pod in on_a100)
    node.close()
    status, table, _ = await run_cli(capsys, ["inventory", "--simulate", str(SCENARIOS / "demo.yaml")])
    assert status == 0 and table.splitlines()[0].split() == ["GPU", "MODEL", "GI", "CI", "PROFILE", "UUID", "MEMORY",
                                                             "PROCESSES", "HELD", "BY"]
    assert all(line.rstrip().endswith("?") for line in table.splitlines()[1:])  # no agent: holders unknown
