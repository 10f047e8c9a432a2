"""The controller, in its own namespace, shares the agents' ceiling: its sends take slots of the same cluster-wide
budget ConfigMap in the agents' namespace, a policy reload resizes it, and both project namespaces are protected."""

from __future__ import annotations

import io
import json
import time
from datetime import datetime, timezone

import aiohttp
import pytest

from controller_payloads import alert, body
from tests.fake_api import FakeApi
from tests.waiting import poll
from watchdog.action import AuditLog
from watchdog.config import Policy
from watchdog.config.action import ActionPolicy, ClusterBudget
from watchdog.config.controller import ControllerSettings
from watchdog.controller import Controller
from watchdog.kube.eviction_budget import DATA_KEY
from watchdog.testbed.cluster.apiserver import FakeApiServer

TOKEN = "budget-token"
GPU = {"nvidia.com/gpu": "1"}
POD_CREATION = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc).timestamp()
AGENTS, CONTROLLERS, BUDGET = "gpu-watchdog", "gpu-watchdog-controller", "gpu-watchdog-eviction-budget"


@pytest.fixture
async def leader(tmp_path, fake_api: FakeApi):
    token = tmp_path / "token"
    token.write_text(TOKEN)
    server = await fake_api.server(clock=lambda: POD_CREATION)  # the pods exist before the alerts' startsAt
    server.add_pod(namespace="team-b", name="batch", priority=1, requests=GPU)
    server.add_pod(namespace="team-c", name="train", priority=1, requests=GPU)
    server.add_pod(namespace=CONTROLLERS, name="batch", priority=1, requests=GPU)
    # An agent on another node took the only slot a minute ago.
    server.set_config_map(AGENTS, BUDGET, {DATA_KEY: json.dumps([{"at": time.time() - 60, "by": "node-7",
                                                                  "pod": "team-c/x"}])})
    settings = ControllerSettings(listen_host="127.0.0.1", listen_port=0, token_file=str(token), identity="solo",
                                  retry_period_seconds=0.2, renew_deadline_seconds=1.5, lease_duration_seconds=2.0,
                                  cluster_evictions_per_minute=600, cluster_eviction_burst=5, plain_http=True)
    policy = ActionPolicy(mode="enforce", cluster_budget=ClusterBudget(enabled=True, max_evictions=1))
    api = await fake_api.client(server)
    controller = Controller(settings, api=api, policy=policy, audit=AuditLog(stream=io.StringIO()), namespace=AGENTS)
    await controller.start()
    try:
        await poll(lambda: controller.is_leader, what="the controller to lead", timeout=5.0, every=0.05)
        yield server, controller
    finally:
        await controller.stop()


async def post(controller: Controller, data: bytes) -> dict:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{controller.url}/api/v1/alertmanager", data=data, headers=headers) as response:
            assert response.status == 200
            return await response.json()


def evictions(server: FakeApiServer) -> list[str]:
    return [path for method, path, _ in server.requests if method == "POST" and path.endswith("/eviction")]


async def test_the_controller_takes_from_the_agents_budget_and_a_reload_resizes_it(leader):
    server, controller = leader
    assert server.objects("leases", CONTROLLERS)  # its Lease is in its own namespace
    [result] = (await post(controller, body(alert(fingerprint="a1"))))["results"]
    assert result["result"] == "rate_limited" and f"{AGENTS}/{BUDGET}" in result["detail"]
    assert evictions(server) == []

    controller.apply_policy(Policy(action=ActionPolicy(mode="enforce", cluster_budget=ClusterBudget(
        enabled=True, max_evictions=2))))
    # Another tenant's pod: the refused one is backed off for a while, as after a PDB refusal.
    [result] = (await post(controller, body(alert(namespace="team-c", pod="train", fingerprint="a2"))))["results"]
    assert result["result"] == "evicted"
    [budget] = [c for c in server.objects("configmaps", AGENTS) if c["metadata"]["name"] == BUDGET]
    assert [entry["by"] for entry in json.loads(budget["data"][DATA_KEY])] == ["node-7", "solo"]


async def test_the_controllers_own_namespace_is_protected(leader):
    server, controller = leader
    [result] = (await post(controller, body(alert(namespace=CONTROLLERS, fingerprint="b1"))))["results"]
    assert result["result"] == "protected"
    assert evictions(server) == []
