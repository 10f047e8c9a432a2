"""The webhook under hostile or oversized input: 400 (never 500, never a retryable 503) for a body or header that
will never succeed, bounded work per request, and no wait on the global lock for a request with nothing to act on."""

from __future__ import annotations

import asyncio
import io
import json
from dataclasses import dataclass

import pytest
from aiohttp.test_utils import TestClient, TestServer

from controller_fakes import MemoryKube, gpu_pod
from controller_payloads import alert, body, payload
from watchdog.action import AuditLog, Evictor, Pacer
from watchdog.config.action import ActionPolicy
from watchdog.config.controller import ControllerSettings
from watchdog.controller.app import WebhookHandler

AUTH = {"Authorization": "Bearer s3cr3t-token", "Content-Type": "application/json"}
BOUND = 10.0  # seconds: only keeps a broken build from hanging; nothing is asserted about durations


@dataclass
class CountingKube(MemoryKube):
    lists: int = 0

    async def list_pods(self, **kwargs):
        self.lists += 1
        return await super().list_pods(**kwargs)


@pytest.fixture
def settings(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cr3t-token\n")
    return ControllerSettings(token_file=str(token), max_alerts_per_request=4,
                              cluster_evictions_per_minute=600, cluster_eviction_burst=5)


@pytest.fixture
async def server(settings):
    kube = CountingKube(pods=[gpu_pod("batch"), gpu_pod("other", priority=5), gpu_pod("x", ns="team-c")])
    policy = ActionPolicy(mode="enforce")
    pacer = Pacer(policy.model_copy(update={"node_evictions_per_minute": 600, "node_eviction_burst": 5}))
    evictor = Evictor(kube, policy=policy, pacer=pacer, audit=AuditLog(stream=io.StringIO()), clock=lambda: 5000.0,
                      node="controller-0", kill_switch=None)
    handler = WebhookHandler(settings=settings, policy=policy, pods=kube, evictor=evictor, pacer=pacer,
                             is_leader=lambda: True, clock=lambda: 5000.0)
    client = TestClient(TestServer(handler.application()))
    await client.start_server()
    try:
        yield client, kube, handler
    finally:
        await client.close()


async def post(client, data: bytes, headers=AUTH):
    response = await asyncio.wait_for(client.post("/api/v1/alertmanager", data=data, headers=headers), BOUND)
    return response.status, await response.json()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"version": "4", "alerts": [], "truncatedAlerts": ' + b"9" * 5000 + b"}", "not valid JSON"),
        (b'{"version": "4", "alerts": [], "x": 1e400}', "not valid JSON"),
        (b'{"version": "4", "alerts": [], "x": NaN}', "not valid JSON"),
    ],
    ids=["nested-100k", "5000-digits", "1e400", "NaN"],
)
async def test_a_body_that_json_cannot_take_is_400(server, data, reason):
    client, kube, _ = server
    status, answer = await post(client, data)
    assert status == 400 and reason in answer["error"]
    assert kube.evictions == []


async def raw_request(client, request: bytes, *, status_line_only: bool = False) -> bytes:
    reader, writer = await asyncio.open_connection(client.host, client.port)
    try:
        writer.write(request)
        return await asyncio.wait_for(reader.readline() if status_line_only else reader.read(), BOUND)
    finally:
        writer.close()
        await writer.wait_closed()


async def test_an_authorization_header_that_is_not_utf8_is_400(server):
    client, kube, _ = server
    answer = await raw_request(client, b"POST /api/v1/alertmanager HTTP/1.1\r\nHost: controller\r\n"
                               b"Authorization: Bearer \xff\xfe\r\nContent-Type: application/json\r\n"
                               b"Content-Length: 2\r\nConnection: close\r\n\r\n{}")
    assert answer.startswith(b"HTTP/1.1 400 ") and b"Authorization" in answer
    assert kube.evictions == []


async def test_a_body_that_trickles_in_is_408_not_a_held_connection(settings, tmp_path):
    settings = settings.model_copy(update={"idle_timeout_seconds": 0.2})
    handler = WebhookHandler(settings=settings, policy=ActionPolicy(), pods=None, evictor=None, pacer=None,
                             is_leader=lambda: True, clock=lambda: 5000.0)
    client = TestClient(TestServer(handler.application()))
    await client.start_server()
    try:
        answer = await raw_request(client, b"POST /api/v1/alertmanager HTTP/1.1\r\nHost: controller\r\n"
                                   b"Authorization: Bearer s3cr3t-token\r\nContent-Type: application/json\r\n"
                                   b"Content-Length: 100\r\n\r\n{\"version\"", status_line_only=True)
    finally:
        await client.close()
    assert answer.startswith(b"HTTP/1.1 408 ")


@pytest.mark.parametrize(
    ("namespace", "pod", "label"),
    [
        ("Team_B", "batch", "namespace"),
        ("team-b/../kube-system", "batch", "namespace"),
        ("a" * 64, None, "namespace"),
        ("team-b", "Batch?x=1", "pod"),
        ("team-b", "batch/eviction", "pod"),
        ("team-b", "b" * 254, "pod"),
    ],
)
async def test_an_invalid_namespace_or_pod_name_is_400_not_a_retryable_503(server, namespace, pod, label):
    client, kube, _ = server
    status, answer = await post(client, body(alert(namespace=namespace, pod=pod)))
    assert status == 400 and f"alerts[0].labels.{label}" in answer["error"]
    assert kube.lists == 0 and kube.evictions == []


async def test_names_matter_only_on_alerts_that_ask_for_an_eviction(server):
    client, _, _ = server
    status, answer = await post(client, body(alert(namespace="Not_A_Namespace", status="resolved")))
    assert status == 200 and answer["skipped"] == ["GpuWatchdogQuotaBreach: resolved"]


async def test_a_request_with_nothing_to_act_on_does_not_wait_for_the_lock(server):
    client, kube, handler = server
    status, _ = await post(client, body(alert()))  # evicts team-b/batch
    assert status == 200 and kube.evictions == [("team-b/batch", False)]
    async with handler._lock:  # a long request (a slow API server) holds the lock
        status, answer = await post(client, body(alert(status="resolved", fingerprint="r")))
        assert status == 200 and answer == {"results": [], "skipped": ["GpuWatchdogQuotaBreach: resolved"]}
        status, answer = await post(client, body(alert()))  # Alertmanager's repeat of the handled firing
        assert status == 200 and [r["result"] for r in answer["results"]] == ["duplicate"]
    assert kube.evictions == [("team-b/batch", False)]


async def test_work_per_request_is_bounded_and_the_rest_is_skipped(server):
    client, kube, _ = server
    alerts = [alert(fingerprint=f"f{i}", pod=None) for i in range(30)]
    status, answer = await post(client, json.dumps(payload(*alerts)).encode())
    assert status == 200 and len(answer["results"]) == 4
    over = [s for s in answer["skipped"] if "over the limit of 4 alerts to act on per request" in s]
    assert len(over) == 26
    # One pod list per namespace per request, listed again only after an eviction changed the namespace.
    assert kube.lists == 2 and len(kube.evictions) == 1


async def test_the_pod_list_is_shared_across_alerts_of_one_request(server):
    client, kube, _ = server
    alerts = [alert(fingerprint=f"c{i}", namespace="team-c", pod="missing") for i in range(4)]
    status, answer = await post(client, json.dumps(payload(*alerts)).encode())
    assert status == 200 and {r["result"] for r in answer["results"]} == {"gone"}
    assert kube.lists == 1
