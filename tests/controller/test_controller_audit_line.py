"""The controller's audit lines name the node each action is about (the alert's node), and the replica that decided
under its own key: an operator grepping a node's history finds the controller's actions on it, not its hostname."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone

import aiohttp
import pytest

from controller_payloads import alert, body
from tests.fake_api import FakeApi
from tests.waiting import poll
from watchdog.action import AuditLog, audit_record
from watchdog.config.action import ActionPolicy
from watchdog.config.controller import ControllerSettings
from watchdog.controller import Controller
from watchdog.model import Decision, EvictionResult, FindingKind, Mode

TOKEN = "audit-token"
POD_CREATION = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc).timestamp()


@pytest.fixture
async def leader(tmp_path, fake_api: FakeApi):
    token = tmp_path / "token"
    token.write_text(TOKEN)
    server = await fake_api.server(clock=lambda: POD_CREATION)
    server.add_pod(namespace="team-b", name="batch", node="gpu-node-7", priority=1, requests={"nvidia.com/gpu": "1"})
    settings = ControllerSettings(listen_host="127.0.0.1", listen_port=0, token_file=str(token), identity="ctl-0",
                                  retry_period_seconds=0.2, renew_deadline_seconds=1.5, lease_duration_seconds=2.0,
                                  cluster_evictions_per_minute=600, cluster_eviction_burst=5, plain_http=True)
    audit = io.StringIO()
    controller = Controller(settings, api=await fake_api.client(server), policy=ActionPolicy(mode="enforce"),
                            audit=AuditLog(stream=audit), namespace="gpu-watchdog")
    await controller.start()
    try:
        await poll(lambda: controller.is_leader, what="the controller to lead", timeout=5.0, every=0.05)
        yield controller, audit
    finally:
        await controller.stop()


async def post(controller: Controller, data: bytes) -> int:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{controller.url}/api/v1/alertmanager", data=data, headers=headers) as response:
            return response.status


def lines(audit: io.StringIO) -> list[dict]:
    return [json.loads(text) for text in audit.getvalue().splitlines()]


async def test_an_eviction_and_a_refusal_name_the_alerts_node_and_the_replica_apart(leader):
    controller, audit = leader
    assert await post(controller, body(alert(node="gpu-node-7", fingerprint="a1"))) == 200
    assert await post(controller, body(alert(node="gpu-node-3", fingerprint="a2"))) == 200  # no such pod there
    evicted, refused = lines(audit)
    assert (evicted["result"], evicted["node"], evicted["controller"]) == ("evicted", "gpu-node-7", "ctl-0")
    assert (refused["result"], refused["node"], refused["controller"]) == ("no_candidate", "gpu-node-3", "ctl-0")


async def test_an_alert_without_node_is_audited_with_no_node_rather_than_the_controllers(leader):
    controller, audit = leader
    assert await post(controller, body(alert(node=None, fingerprint="b1"))) == 400
    [line] = lines(audit)
    assert (line["result"], line["node"], line["controller"]) == ("unsafe", None, "ctl-0")


def test_an_agents_line_names_its_own_node_and_no_controller():
    decision = Decision("quota/team-b/memory", FindingKind.QUOTA, None, EvictionResult.NO_CANDIDATE, "quota",
                        "team-b")
    record = audit_record(timestamp=0.0, node="gpu-node-7", mode=Mode.ENFORCE, decision=decision)
    assert record["node"] == "gpu-node-7" and "controller" not in record
