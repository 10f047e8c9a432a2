"""Leadership re-checked before every send, and the shared ledger of handled firings (in memory and as a ConfigMap
on the fake API server): a firing is recorded before its eviction, forgotten when it may be retried, and an
unreadable ledger means no eviction."""

from __future__ import annotations

import io

import pytest
from aiohttp.test_utils import TestClient, TestServer

from controller_fakes import Gate, MemoryKube, gpu_pod
from controller_payloads import alert, body
from watchdog.action import AuditLog, Evictor, Pacer
from watchdog.config.action import ActionPolicy
from watchdog.config.controller import ControllerSettings
from watchdog.controller.app import WebhookHandler
from watchdog.controller.ledger import ConfigMapLedger, LedgerError, MemoryLedger, firing_key

AUTH = {"Authorization": "Bearer tok", "Content-Type": "application/json"}
KEY = firing_key("f00d", "2026-11-30T10:00:00Z")


class Replica:
    """A WebhookHandler over in-memory Kubernetes, with leadership and the kill switch under the test's control."""

    def __init__(self, token_file, *, ledger, paused: bool = False) -> None:
        self.leader = True
        self.switch = Gate(paused)
        self.kube = MemoryKube(pods=[gpu_pod("batch")])
        self.ledger = ledger
        policy = ActionPolicy(mode="enforce")
        pacer = Pacer(policy)
        evictor = Evictor(self.kube, policy=policy, pacer=pacer, audit=AuditLog(stream=io.StringIO()),
                          clock=lambda: 100.0, node="ctl", kill_switch=self.switch)
        self.handler = WebhookHandler(settings=ControllerSettings(token_file=str(token_file)), policy=policy,
                                      pods=self.kube, evictor=evictor, pacer=pacer, is_leader=lambda: self.leader,
                                      clock=lambda: 100.0, ledger=ledger, identity="ctl")


@pytest.fixture
async def replica(tmp_path):
    token = tmp_path / "token"
    token.write_text("tok")
    clients = []

    async def make(*, ledger=None, paused=False):
        built = Replica(token, ledger=ledger if ledger is not None else MemoryLedger(), paused=paused)
        client = TestClient(TestServer(built.handler.application()))
        await client.start_server()
        clients.append(client)
        return built, client

    try:
        yield make
    finally:
        for client in clients:
            await client.close()


async def post(client, data=None):
    response = await client.post("/api/v1/alertmanager", data=data or body(alert()), headers=AUTH)
    return response.status, await response.json()


async def test_leadership_lost_while_listing_pods_means_503_and_no_eviction(replica):
    built, client = await replica()
    list_pods = built.kube.list_pods

    async def slow_list(**kwargs):
        built.leader = False  # the Lease moves while the API server is slow to answer
        return await list_pods(**kwargs)

    built.kube.list_pods = slow_list
    status, answer = await post(client)
    assert status == 503 and answer["results"][0]["result"] == "not_leader"
    assert built.kube.evictions == [] and built.ledger.entries == {}
    built.kube.list_pods, built.leader = list_pods, True
    status, answer = await post(client)  # Alertmanager's retry: it was never handled, so it acts now
    assert status == 200 and answer["results"][0]["result"] == "evicted"


async def test_leadership_lost_after_recording_the_firing_sends_nothing_and_forgets_it(replica):
    built, client = await replica()
    ledger = built.ledger
    record = ledger.record

    async def record_then_lose(key, entry):
        await record(key, entry)
        built.leader = False

    ledger.record = record_then_lose
    status, answer = await post(client)
    assert status == 503 and answer["results"][0]["result"] == "not_leader"
    assert built.kube.evictions == [] and ledger.entries == {}


async def test_leadership_is_checked_again_once_the_lock_is_held(replica):
    built, client = await replica()
    answers = iter([True])  # the check before the lock passes; by the time the lock is free the Lease is gone
    built.handler._is_leader = lambda: next(answers, False)
    status, answer = await post(client)
    assert status == 503 and "not the leader" in answer["error"] and built.kube.evictions == []


async def test_the_firing_is_recorded_with_its_result_and_a_recorded_firing_is_not_acted_on(replica):
    built, client = await replica()
    status, answer = await post(client)
    assert status == 200 and answer["results"][0]["result"] == "evicted"
    assert built.ledger.entries == {KEY: "evicted team-b/batch by ctl"}
    other, other_client = await replica(ledger=built.ledger)  # a new leader sharing the ledger
    status, answer = await post(other_client)
    assert answer["results"][0]["result"] == "duplicate" and "evicted team-b/batch" in answer["results"][0]["detail"]
    assert other.kube.evictions == []


async def test_a_result_that_may_change_is_forgotten_so_a_retry_can_act(replica):
    built, client = await replica(paused=True)
    status, answer = await post(client)
    assert answer["results"][0]["result"] == "paused" and built.ledger.entries == {}
    built.switch.on = False
    status, answer = await post(client)
    assert answer["results"][0]["result"] == "evicted" and len(built.kube.evictions) == 1


class BrokenLedger(MemoryLedger):
    def __init__(self, *, reads: bool, writes: bool) -> None:
        super().__init__()
        self.reads, self.writes = reads, writes

    async def lookup(self, key):
        if not self.reads:
            raise LedgerError("apiserver down")
        return await super().lookup(key)

    async def record(self, key, entry):
        if not self.writes:
            raise LedgerError("apiserver down")
        await super().record(key, entry)


@pytest.mark.parametrize(("reads", "writes"), [(False, True), (True, False)], ids=["unreadable", "unwritable"])
async def test_an_unusable_ledger_means_503_and_no_eviction(replica, reads, writes):
    built, client = await replica(ledger=BrokenLedger(reads=reads, writes=writes))
    status, answer = await post(client)
    assert status == 503 and answer["results"][0]["result"] == "error" and built.kube.evictions == []


@pytest.fixture
def configmap_ledger(server, api):
    return server, api


async def test_configmap_ledger_records_forgets_and_keeps_the_newest(configmap_ledger):
    server, api = configmap_ledger
    ledger = ConfigMapLedger(api, namespace="gpu-watchdog", name="handled", capacity=2)
    assert await ledger.lookup("a@t") is None
    await ledger.forget("a@t")  # nothing to forget: nothing is written
    assert server.objects("configmaps", "gpu-watchdog") == []
    await ledger.record("a@t", "sending team-b/x by r1")
    await ledger.record("a@t", "evicted team-b/x by r1")
    await ledger.record("b@t", "evicted team-b/y by r1")
    other_replica = ConfigMapLedger(api, namespace="gpu-watchdog", name="handled", capacity=2)
    assert await other_replica.lookup("a@t") == "evicted team-b/x by r1"
    await ledger.record("c@t", "evicted team-b/z by r1")  # over capacity: the oldest goes
    assert await other_replica.lookup("a@t") is None and await other_replica.lookup("c@t") is not None
    await ledger.forget("b@t")
    assert await other_replica.lookup("b@t") is None


async def test_configmap_ledger_errors_are_ledger_errors(configmap_ledger):
    server, api = configmap_ledger
    ledger = ConfigMapLedger(api, namespace="gpu-watchdog", name="handled")
    server.fail_next(1, status=500)
    with pytest.raises(LedgerError, match="cannot read"):
        await ledger.lookup("a@t")
    server.fail_next(1, status=403, path_prefix="/api/v1/namespaces/gpu-watchdog/configmaps")
    with pytest.raises(LedgerError):
        await ledger.record("a@t", "sending")
    with pytest.raises(ValueError, match="capacity"):
        ConfigMapLedger(api, namespace="n", name="c", capacity=0)
