"""The agent's JSON API on its metrics port, on the demo: open findings with evidence, the last decisions and why."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import jsonschema

from tests.service.conftest import SCENARIOS

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "watchdog" / "publishing" / "api.schema.json").read_text())


async def get(port: int, path: str, **params: str) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}{path}", params=params) as response:
            body = await response.json()
            jsonschema.validate(body, SCHEMA)  # every answer, errors included, is a documented document
            return response.status, body


async def test_findings_and_decisions_of_the_demo(drive):
    driver = await drive(SCENARIOS / "demo.yaml", events=False)
    await driver.ticks(70)
    port = driver.agent.port

    status, findings = await get(port, "/api/v1/findings")
    assert status == 200 and findings["kind"] == "FindingList" and findings["node"] == "sim-node-1"
    kinds = {item["kind"] for item in findings["items"]}
    assert {"quota", "unauthorized"} <= kinds
    quota = next(item for item in findings["items"] if item["kind"] == "quota")
    assert quota["culprit"]["namespace"] == "batch" and quota["evidence"] and quota["message"]

    _, batch_only = await get(port, "/api/v1/findings", namespace="batch")
    assert batch_only["items"] and all(
        item["culprit"] and item["culprit"]["namespace"] == "batch"
        or any(victim["namespace"] == "batch" for victim in item["victims"]) for item in batch_only["items"])

    status, decisions = await get(port, "/api/v1/decisions")
    assert status == 200 and decisions["kind"] == "DecisionList"
    stamps = [item["timestamp"] for item in decisions["items"]]
    assert stamps == sorted(stamps, reverse=True)  # newest first
    dry_run = [item for item in decisions["items"] if item["result"] == "dry_run"]
    assert dry_run and dry_run[0]["pod"]["namespace"] == "batch" and dry_run[0]["reason"] == "quota"
    assert dry_run[0]["mode"] == "dry-run" and dry_run[0]["findingKey"] == quota["key"]

    pod = dry_run[0]["pod"]["name"]
    _, about_pod = await get(port, "/api/v1/decisions", namespace="batch", pod=pod, limit="1")
    assert len(about_pod["items"]) == 1 and about_pod["items"][0]["pod"]["name"] == pod

    for bad in ("0", "x", "100000"):
        status, error = await get(port, "/api/v1/decisions", limit=bad)
        assert status == 400 and error["kind"] == "Status" and "limit" in error["message"]


async def test_before_the_first_tick_the_lists_are_empty(drive):
    driver = await drive(SCENARIOS / "demo.yaml", events=False)
    _, findings = await get(driver.agent.port, "/api/v1/findings")
    _, decisions = await get(driver.agent.port, "/api/v1/decisions")
    _, devices = await get(driver.agent.port, "/api/v1/devices")
    assert findings["items"] == [] and decisions["items"] == [] and devices["items"] == []
    assert devices["tick"] is None and devices["kind"] == "DeviceList"


async def test_devices_of_the_demo_with_their_holders_and_processes(drive):
    driver = await drive(SCENARIOS / "demo.yaml", events=False)
    await driver.ticks(31)
    await driver.caught_up()  # scavenger-0, started at tick 30, is in the pod cache
    snapshot = await driver.ticks(3)
    status, devices = await get(driver.agent.port, "/api/v1/devices")
    assert status == 200 and devices["node"] == "sim-node-1" and devices["driverVersion"] == "580.82.07"
    assert devices["tick"] == snapshot.sample.tick
    items = devices["items"]
    assert [(item["gpu"], item["profile"]) for item in items] == [
        (0, "3g.40gb"), (0, "1g.10gb"), (0, "2g.20gb"), (0, "1g.10gb"), (1, "4g.40gb"), (1, "2g.20gb"),
        (1, "1g.10gb"), (2, "")]
    assert {item["uuid"] for item in items[:7]} == {mig.uuid for gpu in snapshot.sample.gpus for mig in gpu.instances}
    whole = items[7]
    assert (whole["mig"], whole["gpuInstance"], whole["uuid"]) == (False, None, whole["gpuUuid"])
    assert sorted(h["name"] for h in whole["holders"]) == ["dash-1", "notebook-3", "train-big"]
    assert sorted(p["pod"]["name"] for p in whole["processes"]) == ["dash-1", "notebook-3", "train-big"]
    ranker = items[5]  # batch/scavenger-0 runs on ml-prod/ranker-1's instance without having been given it
    assert [h["name"] for h in ranker["holders"]] == ["ranker-1"]
    assert sorted(p["pod"]["name"] for p in ranker["processes"]) == ["ranker-1", "scavenger-0"]
    assert all(p["usedMemoryBytes"] > 0 and p["mode"] == "compute" for p in ranker["processes"])
    assert sum(p["usedMemoryBytes"] for p in ranker["processes"]) <= ranker["memoryUsedBytes"]


def test_the_documented_examples_follow_the_schema():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    blocks = [json.loads(block) for block in doc.split("```json\n")[1:] for block in [block.split("```")[0]]]
    finding, decision, device = blocks
    jsonschema.validate({"apiVersion": "gpu-watchdog.io/v1", "kind": "FindingList", "node": "n", "mode": "dry-run",
                         "tick": 69, "timestamp": 1.0, "items": [finding]}, SCHEMA)
    jsonschema.validate({"apiVersion": "gpu-watchdog.io/v1", "kind": "DecisionList", "node": "n",
                         "items": [decision]}, SCHEMA)
    jsonschema.validate({"apiVersion": "gpu-watchdog.io/v1", "kind": "DeviceList", "node": "n", "tick": 69,
                         "timestamp": 1.0, "driverVersion": "580.82.07", "items": [device]}, SCHEMA)


def test_non_finite_evidence_stays_valid_json():
    from watchdog.model import Finding, FindingKind, PodRef, Severity
    from watchdog.publishing.api import finding_json

    finding = Finding(kind=FindingKind.INTERFERENCE, key="k", domain="d", resource="sm", severity=Severity.WARNING,
                      first_tick=1, last_tick=2, since=0.0, culprit=PodRef("a", "b"),
                      evidence={"ratio": float("nan"), "slowdown": float("inf"), "ticks": 2},
                      usage={"a/b": float("nan"), "a/c": 0.5}, needed=float("inf"))
    document = json.loads(json.dumps(finding_json(finding), allow_nan=False))
    assert document["evidence"] == {"ratio": "nan", "slowdown": "inf", "ticks": 2}
    assert document["usage"] == {"a/c": 0.5} and document["needed"] is None
