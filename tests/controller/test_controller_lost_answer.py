"""An eviction whose answer was lost (client timeout, a proxy's 5xx) may have happened: the controller checks the
pod before it forgets the firing, so Alertmanager's next delivery of the same firing never evicts a second pod.

In memory first (every way the pod can have gone), then end to end: the fake API server behind a proxy that
forwards the eviction POST (the server performs it) and answers 502 in its place, as a failing gateway does.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, replace
from datetime import datetime, timezone

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from controller_fakes import MemoryKube, Reply, gpu_pod
from controller_payloads import alert, body
from tests.fake_api import FakeApi
from watchdog.action import AuditLog, Evictor, Pacer
from watchdog.config.action import ActionPolicy
from watchdog.config.controller import ControllerSettings
from watchdog.controller.app import WebhookHandler
from watchdog.controller.ledger import ConfigMapLedger, MemoryLedger, firing_key
from watchdog.testbed.cluster.apiserver import FakeApiServer
from watchdog.kube.client import KubeApi
from watchdog.kube.eviction import KubeEvictions
from watchdog.model import EvictionResult as R
from watchdog.testbed import SimClock

AUTH = {"Authorization": "Bearer tok", "Content-Type": "application/json"}
KEY = firing_key("f00d", "2026-11-30T10:00:00Z")
STARTS_AT = datetime(2026, 11, 30, 10, 0, tzinfo=timezone.utc).timestamp()
NOW = 1_000_000.0  # the controller's clock at the first delivery
REPEAT_INTERVAL = 4 * 3600.0  # Alertmanager's default: past every backoff and cooldown
FIRING = body(alert(pod=None))  # namespace-only: the controller picks the tenant's pod


@dataclass
class LostAnswerKube(MemoryKube):
    """Its eviction answers are lost. `performed` is what the API server did first: "deleted" (gone at once),
    "terminating" (deletionTimestamp set), "replaced" (a namesake with another uid) or "nothing"."""

    performed: str = "deleted"
    status: int | None = None  # None: our client timed out; else the status a proxy answered
    lists_fail_after_evict: bool = False
    losing: bool = True

    async def evict(self, pod, *, dry_run, grace_seconds=None):
        if not self.losing:
            return await super().evict(pod, dry_run=dry_run, grace_seconds=grace_seconds)
        self.evictions.append((pod.key, dry_run))
        changed = {"terminating": {"deleting": True}, "replaced": {"uid": "u-namesake"}}.get(self.performed)
        if self.performed == "deleted":
            self.pods = [p for p in self.pods if p.name != pod.name]
        elif changed is not None:
            self.pods = [replace(p, **changed) if p.name == pod.name else p for p in self.pods]
        self.list_fails = self.lists_fail_after_evict
        message = "ReadTimeout: no answer" if self.status is None else f"HTTP {self.status}: no message"
        return Reply(R.ERROR, self.status, message)


class Controller:
    """A WebhookHandler over LostAnswerKube with a clock the test moves."""

    def __init__(self, token_file, kube: LostAnswerKube, *, mode: str = "enforce") -> None:
        self.clock = SimClock(NOW)
        self.kube = kube
        self.ledger = MemoryLedger()
        policy = ActionPolicy(mode=mode)
        pacer = Pacer(policy)
        evictor = Evictor(kube, policy=policy, pacer=pacer, audit=AuditLog(stream=io.StringIO()),
                          clock=self.clock, node="ctl", kill_switch=None)
        self.handler = WebhookHandler(settings=ControllerSettings(token_file=str(token_file)), policy=policy,
                                      pods=kube, evictor=evictor, pacer=pacer, is_leader=lambda: True,
                                      clock=self.clock, ledger=self.ledger, identity="ctl")


@pytest.fixture
async def make(tmp_path):
    token = tmp_path / "token"
    token.write_text("tok")
    clients = []

    async def build(kube: LostAnswerKube, **options):
        built = Controller(token, kube, **options)
        client = TestClient(TestServer(built.handler.application()))
        await client.start_server()
        clients.append(client)
        return built, client

    try:
        yield build
    finally:
        for client in clients:
            await client.close()


async def deliver(client, data: bytes = FIRING) -> tuple[int, str, str]:
    response = await client.post("/api/v1/alertmanager", data=data, headers=AUTH)
    answer = await response.json()
    return response.status, answer["results"][0]["result"], answer["results"][0]["detail"]


@pytest.mark.parametrize(
    ("performed", "status"),
    [("deleted", None), ("terminating", 504), ("replaced", 502), ("deleted", 500)],
    ids=["gone-timeout", "terminating-504", "replaced-502", "gone-500"],
)
async def test_a_lost_answer_after_the_eviction_happened_counts_as_evicted(make, performed, status):
    built, client = await make(LostAnswerKube(pods=[gpu_pod("a"), gpu_pod("b")], performed=performed, status=status))
    code, result, detail = await deliver(client)
    assert (code, result) == (200, "evicted") and "answer" in detail
    assert built.ledger.entries[KEY].startswith("evicted team-b/")
    for _ in range(2):  # Alertmanager's repeats of the same firing
        built.clock.advance(REPEAT_INTERVAL)
        assert (await deliver(client))[:2] == (200, "duplicate")
    assert len(built.kube.evictions) == 1


async def test_a_lost_answer_with_the_pod_still_there_stays_retryable(make):
    built, client = await make(LostAnswerKube(pods=[gpu_pod("a"), gpu_pod("b")], performed="nothing"))
    code, result, _ = await deliver(client)
    assert (code, result) == (200, "error") and built.ledger.entries == {}
    built.kube.losing = False
    built.clock.advance(REPEAT_INTERVAL)
    assert (await deliver(client))[:2] == (200, "evicted")
    first, second = built.kube.evictions
    assert first == second  # the same pod, tried again: nothing else was evicted


async def test_an_unreadable_check_keeps_the_firing_until_it_can_be_checked(make):
    kube = LostAnswerKube(pods=[gpu_pod("a"), gpu_pod("b")], performed="deleted", lists_fail_after_evict=True)
    built, client = await make(kube)
    code, result, _ = await deliver(client)
    assert (code, result) == (503, "error")  # Alertmanager retries soon
    assert built.ledger.entries[KEY].startswith("unknown team-b/")
    built.clock.advance(60)
    assert (await deliver(client))[:2] == (503, "error")  # still unknown: nothing new is sent
    kube.list_fails = False
    built.clock.advance(60)
    code, result, detail = await deliver(client)
    assert (code, result) == (200, "duplicate") and "gone" in detail
    assert built.ledger.entries[KEY].startswith("evicted team-b/") and len(kube.evictions) == 1


async def test_an_unknown_entry_whose_pod_is_still_there_is_tried_again(make):
    kube = LostAnswerKube(pods=[gpu_pod("a"), gpu_pod("b")], performed="nothing", lists_fail_after_evict=True)
    built, client = await make(kube)
    assert (await deliver(client))[:2] == (503, "error")
    kube.list_fails, kube.losing = False, False
    built.clock.advance(REPEAT_INTERVAL)
    assert (await deliver(client))[:2] == (200, "evicted")
    first, second = kube.evictions
    assert first == second and built.ledger.entries[KEY].startswith("evicted " + first[0])


async def test_a_lost_dry_run_answer_is_never_taken_for_an_eviction(make):
    built, client = await make(LostAnswerKube(pods=[gpu_pod("a"), gpu_pod("b")], performed="deleted"),
                               mode="dry-run")
    assert (await deliver(client))[:2] == (200, "error") and built.ledger.entries == {}


class LosingProxy:
    """A gateway in front of the fake API server. Armed, it answers the next eviction POST with 502 — after
    forwarding it (the API server performs the eviction) or, with `forward=False`, without."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.armed = False
        self.forward = True
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    async def start(self) -> str:
        self._session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._relay)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _relay(self, request: web.Request) -> web.Response:
        eviction = request.method == "POST" and request.path.endswith("/eviction") and self.armed
        if eviction:
            self.armed = False
        if not (eviction and not self.forward):
            headers = {k: v for k, v in request.headers.items() if k in ("Content-Type", "Accept", "Authorization")}
            async with self._session.request(request.method, self.upstream + request.path_qs,
                                             data=await request.read(), headers=headers) as upstream:
                raw, status = await upstream.read(), upstream.status
                content_type = upstream.headers.get("Content-Type", "application/json")
            if not eviction:
                return web.Response(body=raw, status=status, headers={"Content-Type": content_type})
        return web.Response(text="<html>502 Bad Gateway</html>", status=502, content_type="text/html")


@pytest.fixture
async def gateway(fake_api: FakeApi):
    proxies = []

    async def build(**server_options):
        # Pods are created an hour before the alerts' startsAt, on the fake's injected clock.
        server = await fake_api.server(clock=lambda: STARTS_AT - 3600, **server_options)
        proxy = LosingProxy(server.url)
        await proxy.start()
        proxies.append(proxy)
        return server, proxy, await fake_api.client(proxy)

    try:
        yield build
    finally:
        for proxy in proxies:
            await proxy.stop()


def real_eviction_posts(server: FakeApiServer) -> list[str]:
    return [path for method, path, query in server.requests
            if method == "POST" and path.endswith("/eviction") and "dryRun" not in query]


async def handler_over(api: KubeApi, token_file, clock) -> WebhookHandler:
    kube = KubeEvictions(api)
    policy = ActionPolicy(mode="enforce")
    pacer = Pacer(policy)
    evictor = Evictor(kube, policy=policy, pacer=pacer, audit=AuditLog(stream=io.StringIO()), clock=clock,
                      node="ctl", kill_switch=None)
    return WebhookHandler(settings=ControllerSettings(token_file=str(token_file)), policy=policy, pods=kube,
                          evictor=evictor, pacer=pacer, is_leader=lambda: True, clock=clock,
                          ledger=ConfigMapLedger(api, namespace="gpu-watchdog", name="handled"), identity="ctl")


@pytest.mark.parametrize("instant_deletes", [True, False], ids=["pod-gone", "pod-terminating"])
async def test_a_gateway_502_after_the_eviction_never_evicts_a_second_pod(gateway, tmp_path, instant_deletes):
    server, proxy, api = await gateway(instant_deletes=instant_deletes)
    for name in ("a", "b", "c"):
        server.add_pod(namespace="team-b", name=name, priority=1, requests={"nvidia.com/gpu": "1"})
    (tmp_path / "token").write_text("tok")
    clock = SimClock(NOW)
    handler = await handler_over(api, tmp_path / "token", clock)
    async with TestClient(TestServer(handler.application())) as client:
        proxy.armed = True
        code, result, _ = await deliver(client)
        assert (code, result) == (200, "evicted")
        clock.advance(REPEAT_INTERVAL)
        assert (await deliver(client))[:2] == (200, "duplicate")
    assert len(real_eviction_posts(server)) == 1


async def test_a_gateway_502_before_the_eviction_lets_the_retry_evict_that_pod(gateway, tmp_path):
    server, proxy, api = await gateway(instant_deletes=True)
    for name in ("a", "b"):
        server.add_pod(namespace="team-b", name=name, priority=1, requests={"nvidia.com/gpu": "1"})
    (tmp_path / "token").write_text("tok")
    clock = SimClock(NOW)
    handler = await handler_over(api, tmp_path / "token", clock)
    async with TestClient(TestServer(handler.application())) as client:
        proxy.armed, proxy.forward = True, False
        assert (await deliver(client))[:2] == (200, "error")
        assert real_eviction_posts(server) == [] and len(server.objects("pods", "team-b")) == 2
        clock.advance(REPEAT_INTERVAL)
        assert (await deliver(client))[:2] == (200, "evicted")
    assert len(real_eviction_posts(server)) == 1 and len(server.objects("pods", "team-b")) == 1
