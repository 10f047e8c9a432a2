"""The controller follows the policy file as the agents do: an edit to `mode: observe` stops the very next alert
from sending anything, with the controller's own namespace still protected and the cluster-wide bucket kept; a bad
edit changes nothing. The watcher's check is called directly (no waiting out its poll interval); real time is
spent only polling for the Lease (bounded)."""

from __future__ import annotations

import io
from datetime import datetime, timezone

import aiohttp
import pytest

from controller_payloads import alert, body
from tests.fake_api import FakeApi
from tests.waiting import poll
from watchdog.action import AuditLog
from watchdog.config import load_policy
from watchdog.config.controller import ControllerSettings
from watchdog.controller import Controller
from watchdog.testbed.cluster.apiserver import FakeApiServer

TOKEN = "reload-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
STARTS_AT = datetime(2026, 11, 30, 10, 0, tzinfo=timezone.utc).timestamp()
ENFORCE = "action:\n  mode: enforce\n  tenant_cooldown_seconds: 0\n"


@pytest.fixture
async def controller(tmp_path, fake_api: FakeApi):
    token, policy_file = tmp_path / "token", tmp_path / "policy.yaml"
    token.write_text(TOKEN)
    policy_file.write_text(ENFORCE)
    server = await fake_api.server(clock=lambda: STARTS_AT - 3600)  # pods exist before the alerts start
    for namespace, name in (("team-b", "batch"), ("team-c", "job"), ("gpu-watchdog", "batch")):
        server.add_pod(namespace=namespace, name=name, requests={"nvidia.com/gpu": "1"})
    api = await fake_api.client(server)
    settings = ControllerSettings(listen_host="127.0.0.1", listen_port=0, plain_http=True, token_file=str(token),
                                  identity="solo",
                                  lease_duration_seconds=2.0, renew_deadline_seconds=1.5, retry_period_seconds=0.2,
                                  cluster_evictions_per_minute=600, cluster_eviction_burst=5)
    built = Controller(settings, api=api, policy=load_policy(str(policy_file)).action, policy_file=str(policy_file),
                       audit=AuditLog(stream=io.StringIO()), namespace="gpu-watchdog")
    await built.start()
    try:
        await poll(lambda: built.is_leader, what="the first Lease acquisition", timeout=6.0, every=0.05)
        yield built, server, policy_file
    finally:
        await built.stop()


async def post(controller: Controller, data: bytes) -> str:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{controller.url}/api/v1/alertmanager", data=data, headers=HEADERS) as response:
            assert response.status == 200
            return (await response.json())["results"][0]["result"]


def eviction_posts(server: FakeApiServer) -> int:
    return sum(1 for method, path, _ in server.requests if method == "POST" and path.endswith("/eviction"))


async def test_a_reload_to_observe_stops_the_next_alert(controller):
    built, server, policy_file = controller
    policy_file.write_text("action:\n  mode: observe\n")
    assert built.policy_watcher.check() is True
    assert await post(built, body(alert(pod="batch"))) == "observed"
    assert eviction_posts(server) == 0
    # The overlay the controller adds to every policy survives the reload.
    assert await post(built, body(alert(namespace="gpu-watchdog", fingerprint="own"))) == "protected"
    assert built.pacer.policy.node_evictions_per_minute == 600 and built.pacer.policy.node_eviction_burst == 5
    assert dict(built.policy_reloads) == {"success": 1}


async def test_a_bad_reload_keeps_the_last_good_policy(controller):
    built, server, policy_file = controller
    policy_file.write_text("action:\n  mode: observe\n")
    assert built.policy_watcher.check() is True
    policy_file.write_text("action:\n  mode: sometimes\n")
    assert built.policy_watcher.check() is False
    assert await post(built, body(alert(pod="batch"))) == "observed"
    policy_file.write_text(ENFORCE + "  grace_seconds: 5\n")  # back to enforce: a new firing evicts again
    assert built.policy_watcher.check() is True
    # Another tenant: team-b's observed "eviction" started its tenant cooldown, as it would have in enforce mode.
    assert await post(built, body(alert(namespace="team-c", pod="job", fingerprint="next"))) == "evicted"
    assert eviction_posts(server) == 1 and dict(built.policy_reloads) == {"success": 2, "failure": 1}
