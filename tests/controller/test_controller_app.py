"""The webhook server with in-memory Kubernetes: auth, 400/413, leadership, duplicates, resolved alerts, pacing."""

from __future__ import annotations

import io
import json

import pytest
from aiohttp.test_utils import TestClient, TestServer

from controller_fakes import MemoryKube, gpu_pod
from controller_payloads import alert, body
from watchdog.action import AuditLog, Evictor, Pacer
from watchdog.config.action import ActionPolicy
from watchdog.config.controller import ControllerSettings
from watchdog.controller.app import WebhookHandler


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "token"
    path.write_text("s3cr3t-token\n")
    return path


@pytest.fixture
async def server(token_file):
    kube = MemoryKube(pods=[gpu_pod("batch"), gpu_pod("other"), gpu_pod("core", ns="kube-system")])
    leader = [True]
    settings = ControllerSettings(token_file=str(token_file), max_body_bytes=64 * 1024,
                                  cluster_evictions_per_minute=600, cluster_eviction_burst=5)
    policy = ActionPolicy(mode="enforce")
    pacer = Pacer(policy.model_copy(update={"node_evictions_per_minute": 600, "node_eviction_burst": 5}))
    audit = io.StringIO()
    evictor = Evictor(kube, policy=policy, pacer=pacer, audit=AuditLog(stream=audit), clock=lambda: 5000.0,
                      node="controller-0", kill_switch=None)
    handler = WebhookHandler(settings=settings, policy=policy, pods=kube, evictor=evictor, pacer=pacer,
                             is_leader=lambda: leader[0], clock=lambda: 5000.0)
    client = TestClient(TestServer(handler.application()))
    await client.start_server()
    try:
        yield client, kube, leader, audit, token_file
    finally:
        await client.close()


AUTH = {"Authorization": "Bearer s3cr3t-token"}


async def post(client, data, headers=AUTH):
    headers = {**headers, "Content-Type": "application/json"}
    response = await client.post("/api/v1/alertmanager", data=data, headers=headers)
    return response.status, await response.json()


async def test_evicts_once_and_ignores_duplicates(server):
    client, kube, _, audit, _ = server
    status, answer = await post(client, body(alert()))
    assert status == 200 and answer["results"][0]["result"] == "evicted"
    status, answer = await post(client, body(alert()))  # Alertmanager's repeat: same fingerprint and startsAt
    assert status == 200 and answer["results"][0]["result"] == "duplicate"
    assert kube.evictions == [("team-b/batch", False)] and kube.events == ["team-b/batch"]
    line = json.loads(audit.getvalue().splitlines()[0])
    assert line["reason"] == "alert" and line["evidence"]["fingerprint"] == "f00d"


async def test_auth_is_required_and_token_file_rotation_is_seen(server):
    client, kube, _, _, token_file = server
    assert (await post(client, body(alert()), headers={}))[0] == 401
    assert (await post(client, body(alert()), headers={"Authorization": "Bearer wrong"}))[0] == 401
    assert (await post(client, body(alert()), headers={"Authorization": "Basic czNjcjN0"}))[0] == 401
    token_file.write_text("rotated-token-with-other-length")
    assert (await post(client, body(alert())))[0] == 401
    rotated = {"Authorization": "Bearer rotated-token-with-other-length"}
    assert (await post(client, body(alert()), headers=rotated))[0] == 200
    token_file.unlink()
    assert (await post(client, body(alert()), headers=rotated))[0] == 401
    assert (await client.get("/readyz")).status == 503
    assert kube.evictions == [("team-b/batch", False)]


async def test_bad_payloads(server):
    client, kube, _, _, _ = server
    status, answer = await post(client, b"{oops")
    assert status == 400 and "not valid JSON" in answer["error"]
    status, answer = await post(client, body(alert(), version="3"))
    assert status == 400 and "version" in answer["error"]
    big = json.dumps({"version": "4", "alerts": [], "pad": "x" * 70_000}).encode()
    assert (await post(client, big))[0] == 413
    assert kube.evictions == []


async def test_non_leader_answers_503_and_acts_later(server):
    client, kube, leader, _, _ = server
    leader[0] = False
    status, answer = await post(client, body(alert()))
    assert status == 503 and kube.evictions == []
    leader[0] = True
    status, answer = await post(client, body(alert()))  # Alertmanager's retry reaches a leader
    assert status == 200 and answer["results"][0]["result"] == "evicted"


async def test_resolved_and_protected(server):
    client, kube, _, _, _ = server
    alerts = [alert(status="resolved"), alert(fingerprint="k", namespace="kube-system", pod="core")]
    status, answer = await post(client, body(*alerts))
    assert status == 200
    assert answer["skipped"] == ["GpuWatchdogQuotaBreach: resolved"]
    assert answer["results"][0]["result"] == "protected" and kube.evictions == []


async def test_namespace_only_alert_and_rate_limit(server):
    client, kube, _, _, _ = server
    alerts = [alert(fingerprint=f"f{i}", pod=None) for i in range(7)]
    status, answer = await post(client, body(*alerts))
    results = [r["result"] for r in answer["results"]]
    # Burst 5 and tenant cooldown: the first evicts, the next ones wait; none is remembered as handled.
    assert results[0] == "evicted" and set(results[1:]) <= {"cooldown", "rate_limited", "already_evicted"}
    assert len(kube.evictions) == 1


async def test_unreachable_api_answers_503_without_crashing(server):
    client, kube, _, _, _ = server
    kube.list_fails = True
    status, answer = await post(client, body(alert()))
    assert status == 503 and answer["results"][0]["result"] == "error"
    kube.list_fails = False
    status, answer = await post(client, body(alert()))
    assert status == 200 and answer["results"][0]["result"] == "evicted"


async def test_health_endpoints(server):
    client, *_ = server
    assert (await client.get("/healthz")).status == 200
    ready = await client.get("/readyz")
    assert ready.status == 200 and (await ready.json()) == {"ready": True, "leader": True}
