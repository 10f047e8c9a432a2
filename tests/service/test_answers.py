"""`gpu-watchdog explain NAMESPACE/POD` and `gpu-watchdog inventory` against the simulated world and its agent.

The CLI runs in a worker thread (it has its own event loop, as in a terminal) while the world, the fake API
server and the agent keep serving in the test's loop; it reaches them over real HTTP with a real kubeconfig, and
finds the agent as it finds a real one: its DaemonSet pod on the node, at the pod's IP and `metrics` port.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import jsonschema

from tests.service.conftest import SCENARIOS
from watchdog.cli import main
from watchdog.testbed import SimClock, SimulatedGpuNode

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "watchdog" / "publishing" / "api.schema.json").read_text())


async def run_cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    status = await asyncio.to_thread(main, argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


async def demo_after(drive, ticks: int, *, agent_pod: bool = True):
    driver = await drive(SCENARIOS / "demo.yaml", events=False)
    if agent_pod:  # what run_simulated does once the agent listens: its DaemonSet pod joins the cluster
        driver.world.add_agent_pod(port=driver.agent.port)
    await driver.ticks(max(ticks - 2, 0))
    await driver.caught_up()  # the agent's caches hold every pod started so far, for the last two ticks
    await driver.ticks(min(ticks, 2))
    kubeconfig = driver.world.api.write_kubeconfig(driver.world.workdir / "kubeconfig", name="explain-test")
    return driver, str(kubeconfig), f"http://127.0.0.1:{driver.agent.port}"


RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


async def test_explain_finds_the_agent_and_tells_the_story_of_a_dry_run_eviction(drive, capsys):
    driver, kubeconfig, agent = await demo_after(drive, 70)
    status, out, err = await run_cli(capsys, ["explain", "batch/scavenger-0", "--kubeconfig", kubeconfig])
    assert status == 0, err
    assert out.startswith("Pod batch/scavenger-0 (Running) on node sim-node-1, priority")
    assert f"GPU devices the agent ({agent}) sees it use:" in out  # found by label, node, pod IP and port name
    devices = [line for line in out.splitlines() if line.startswith("  - GPU ")]
    assert len(devices) == 1 and "MIG 2g.20gb GPU instance 5 (MIG-" in devices[0]  # the instance it uses, once
    assert "4.0 GiB of it by its 1 process(es); not assigned to it (the kubelet gave it ml-prod/ranker-1)" in out
    assert "culprit of a critical unauthorized finding" in out
    assert "dry_run for the quota finding (dry-run mode, HTTP 201)" in out
    assert "Events on the pod (1):" in out  # the agent's Event about the dry-run eviction, read back from the API
    # One time format for the agent's times and the cluster's: RFC 3339, UTC, to the second.
    stamped = [line for line in out.splitlines() if line.startswith("  - ") and not line.startswith("  - GPU")]
    assert stamped and all(RFC3339.search(line) for line in stamped)
    assert " UTC" not in out and "+00:00" not in out

    # --agent-url names the agent instead of finding it.
    status, out, _ = await run_cli(capsys, ["explain", "ml-prod/ranker-1", "--kubeconfig", kubeconfig,
                                            "--agent-url", agent, "--json"])
    facts = json.loads(out)
    assert status == 0 and facts["node"] == "sim-node-1"
    assert any("victim" in finding["roles"] and finding["kind"] == "unauthorized" for finding in facts["findings"])


async def test_explain_lists_an_assigned_mig_device_once(drive, capsys):
    driver, kubeconfig, _ = await demo_after(drive, 3)
    status, out, err = await run_cli(capsys, ["explain", "ml-prod/inference-0", "--kubeconfig", kubeconfig])
    assert status == 0, err
    devices = [line for line in out.splitlines() if line.startswith("  - GPU ")]
    assert len(devices) == 1, out  # the instance's series and the pod's own series name one device
    assert "MIG 2g.20gb GPU instance 5" in devices[0] and devices[0].endswith("; assigned to it")


async def test_explain_uses_the_agent_port_its_pod_names_unless_told(drive, capsys):
    driver, kubeconfig, _ = await demo_after(drive, 1)
    pods = driver.world.api.objects("pods", "gpu-watchdog")
    assert [p["spec"]["containers"][0]["ports"] for p in pods] == [
        [{"name": "metrics", "containerPort": driver.agent.port, "protocol": "TCP"}]]
    status, out, _ = await run_cli(capsys, ["explain", "ml-prod/inference-0", "--kubeconfig", kubeconfig,
                                            "--agent-port", "1"])
    assert status == 0 and "could not be asked" in out and "127.0.0.1:1" in out


async def test_explain_without_the_agent_still_answers_from_the_cluster(drive, capsys):
    driver, kubeconfig, _ = await demo_after(drive, 2, agent_pod=False)
    status, out, _ = await run_cli(capsys, ["explain", "ml-prod/inference-0", "--kubeconfig", kubeconfig])
    assert status == 0
    assert "The node's agent could not be asked (no running gpu-watchdog agent pod on node sim-node-1" in out


async def test_explain_a_pod_that_does_not_exist_is_one_line(drive, capsys):
    driver, kubeconfig, agent = await demo_after(drive, 1)
    status, out, err = await run_cli(capsys, ["explain", "batch/nope", "--kubeconfig", kubeconfig,
                                              "--agent-url", agent])
    assert status == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("gpu-watchdog explain: not found in the cluster (") and "nope" in err


async def test_inventory_asks_the_nodes_agent_for_the_live_layout_and_holders(drive, capsys):
    driver, kubeconfig, agent = await demo_after(drive, 40)
    status, out, err = await run_cli(capsys, ["inventory", "--kubeconfig", kubeconfig, "--json"])
    assert status == 0, err
    document = json.loads(out)
    jsonschema.validate(document, SCHEMA)
    assert document["kind"] == "DeviceList" and document["node"] == "sim-node-1" and document["tick"] >= 39
    items = document["items"]
    assert len(items) == 4 + 3 + 1  # two MIG H100s (4 and 3 instances) and one whole A100
    by_profile = {(item["gpu"], item["profile"], item["gpuInstance"]): item for item in items}
    inference = by_profile[(0, "2g.20gb", 5)]
    assert [(h["namespace"], h["name"]) for h in inference["holders"]] == [("ml-prod", "inference-0")]
    assert [(p["mode"], p["pod"]["name"]) for p in inference["processes"]] == [("compute", "inference-0")]
    shared = by_profile[(1, "2g.20gb", 5)]  # ranker-1's, which scavenger-0 uses since tick 30: the live node
    assert sorted(p["pod"]["name"] for p in shared["processes"]) == ["ranker-1", "scavenger-0"]
    node = SimulatedGpuNode.from_scenario(SCENARIOS / "demo.yaml", SimClock())
    on_a100 = [pod for pod in node.scenario.pods if pod.device is not None and pod.device.gpu == 2 and pod.running(2)]
    node.close()
    assert sorted(h["name"] for h in by_profile[(2, "", None)]["holders"]) == sorted(pod.name for pod in on_a100)

    status, table, _ = await run_cli(capsys, ["inventory", "--kubeconfig", kubeconfig])
    lines = table.splitlines()
    assert status == 0 and lines[0].startswith(f"Node sim-node-1: asked its agent, pod gpu-watchdog/gpu-watchdog-")
    assert f"at {agent}" in lines[0]
    assert lines[1].split() == ["GPU", "MODEL", "GI", "CI", "PROFILE", "UUID", "MEMORY", "PROCESSES", "HELD", "BY"]
    assert any(line.endswith("ml-prod/ranker-1 (also used by batch/scavenger-0)") for line in lines)

    status, named, _ = await run_cli(capsys, ["inventory", "--agent-url", agent])
    assert status == 0 and named.splitlines()[0].startswith(f"Node sim-node-1: asked the agent at {agent}")


async def test_inventory_of_a_simulated_node_says_holders_are_unknown(capsys):
    status, table, err = await run_cli(capsys, ["inventory", "--simulate", str(SCENARIOS / "demo.yaml")])
    lines = table.splitlines()
    assert status == 0, err
    assert lines[0].startswith("Node sim-node-1: a fresh simulation of") and "holders unknown" in lines[0]
    assert len(lines) == 2 + 8 and all(line.rstrip().endswith("?") for line in lines[2:])


async def test_inventory_with_several_agents_asks_which_node(drive, capsys):
    driver, kubeconfig, agent = await demo_after(drive, 1)
    other = driver.world.api.objects("pods", "gpu-watchdog")[0]
    other["metadata"] = {"name": "gpu-watchdog-other", "namespace": "gpu-watchdog",
                         "labels": other["metadata"]["labels"]}
    other["spec"]["nodeName"] = "sim-node-2"
    driver.world.api.add_pod(other)
    status, out, err = await run_cli(capsys, ["inventory", "--kubeconfig", kubeconfig])
    assert status == 2 and out == "" and len(err.splitlines()) == 1
    assert "2 gpu-watchdog agents answer (sim-node-1, sim-node-2): pass --node NODE" in err
    status, out, err = await run_cli(capsys, ["inventory", "--kubeconfig", kubeconfig, "--node", "sim-node-1"])
    assert status == 0 and f"at {agent}" in out.splitlines()[0], err
    status, _, err = await run_cli(capsys, ["inventory", "--kubeconfig", kubeconfig, "--node", "sim-node-9"])
    assert status == 2 and "no running gpu-watchdog agent pod on node sim-node-9" in err


async def test_inventory_with_neither_agent_nor_nvml_says_what_to_pass(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    status, out, err = await run_cli(capsys, ["inventory"])
    if status == 0:  # a machine with a GPU answers from its own NVML
        assert "this machine's NVML, no agent asked" in out
        return
    assert status == 2 and out == "" and len(err.splitlines()) == 1
    assert "could not look for an agent in a cluster (not running in a cluster" in err
    assert "--agent-url URL" in err and "--simulate SCENARIO" in err
