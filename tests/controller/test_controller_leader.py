"""Two controller replicas against one fake API server: only the Lease holder acts, the other answers 503, and
when the holder stops renewing the other takes over within a lease duration — without evicting twice."""

from __future__ import annotations

import asyncio
import io
from datetime import datetime, timezone

import aiohttp
import pytest

from controller_payloads import alert, body
from tests.fake_api import FakeApi
from tests.waiting import poll
from watchdog.action import AuditLog
from watchdog.config.action import ActionPolicy
from watchdog.config.controller import ControllerSettings
from watchdog.controller import Controller
from watchdog.testbed.cluster.apiserver import FakeApiServer

LEASE, RENEW, RETRY = 2.0, 1.5, 0.2
TOKEN = "replica-token"
GPU = {"nvidia.com/gpu": "1"}
POD_CREATION = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc).timestamp()


@pytest.fixture
async def replicas(tmp_path, fake_api: FakeApi):
    token = tmp_path / "token"
    token.write_text(TOKEN)
    server = await fake_api.server(clock=lambda: POD_CREATION)  # the pod exists before the alert's startsAt
    server.add_pod(namespace="team-b", name="batch", priority=1, requests=GPU)
    controllers = []
    try:
        for identity in ("replica-a", "replica-b"):
            settings = ControllerSettings(
                listen_host="127.0.0.1", listen_port=0, plain_http=True, token_file=str(token),
                lease_namespace="gpu-watchdog",
                identity=identity, lease_duration_seconds=LEASE, renew_deadline_seconds=RENEW,
                retry_period_seconds=RETRY, cluster_evictions_per_minute=600, cluster_eviction_burst=5,
            )
            controller = Controller(settings, api=await fake_api.client(server), policy=ActionPolicy(mode="enforce"),
                                    audit=AuditLog(stream=io.StringIO()), namespace="gpu-watchdog")
            await controller.start()
            controllers.append(controller)
        yield server, controllers
    finally:
        for controller in controllers:
            await controller.stop()


async def post(session: aiohttp.ClientSession, controller: Controller, data: bytes) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    async with session.post(f"{controller.url}/api/v1/alertmanager", data=data, headers=headers) as response:
        return response.status, await response.json()


def real_evictions(server: FakeApiServer) -> int:
    return sum(1 for _, path, query in server.requests if path.endswith("/eviction") and "dryRun" not in query)


async def test_only_the_leader_acts_and_the_other_takes_over(replicas):
    server, controllers = replicas
    await poll(lambda: any(c.is_leader for c in controllers), what="a leader", timeout=LEASE * 3, every=0.05)
    assert sum(c.is_leader for c in controllers) == 1
    leader = next(c for c in controllers if c.is_leader)
    follower = next(c for c in controllers if not c.is_leader)
    lease = server.objects("leases", "gpu-watchdog")[0]
    assert lease["spec"]["holderIdentity"] == leader.identity

    async with aiohttp.ClientSession() as session:
        status, answer = await post(session, follower, body(alert()))
        assert status == 503 and real_evictions(server) == 0
        status, answer = await post(session, leader, body(alert()))
        assert status == 200 and answer["results"][0]["result"] == "evicted"
        assert server.get_pod("team-b", "batch")["metadata"].get("deletionTimestamp")

        await leader.stop_electing()  # the leader stops renewing, as a crashed replica would
        assert not leader.is_leader
        # The follower may take the Lease once it has seen it unchanged for a lease duration.
        await poll(lambda: follower.is_leader, what="the follower to lead", timeout=LEASE + 3 * RETRY + 1.0, every=0.05)
        assert server.objects("leases", "gpu-watchdog")[0]["spec"]["holderIdentity"] == follower.identity

        status, _ = await post(session, leader, body(alert()))
        assert status == 503
        # Alertmanager's retry reaches the new leader, which reads the firing in the shared ledger: not evicted
        # a second time.
        status, answer = await post(session, follower, body(alert()))
        assert status == 200 and answer["results"][0]["result"] == "duplicate"
        assert real_evictions(server) == 1
        async with session.get(f"{follower.url}/readyz") as response:
            assert (await response.json())["leader"] is True


async def test_run_controller_starts_leads_and_stops(tmp_path, server: FakeApiServer):
    from watchdog.config import KubeSettings, Settings
    from watchdog.controller import run_controller

    token = tmp_path / "token"
    token.write_text(TOKEN)
    stop = asyncio.Event()
    settings = Settings.model_validate({
        "namespace": "gpu-watchdog",
        "kube": KubeSettings(access="url", url=server.url).model_dump(),
        "controller": {"listen_host": "127.0.0.1", "listen_port": 0, "plain_http": True, "token_file": str(token),
                       "identity": "solo",
                       "lease_duration_seconds": LEASE, "renew_deadline_seconds": RENEW,
                       "retry_period_seconds": RETRY},
        "audit_log": str(tmp_path / "audit.jsonl"),
    })
    task = asyncio.create_task(run_controller(settings, stop=stop))
    try:
        # The Lease is in the controller's own namespace (controller.lease_namespace), not the agents'.
        await poll(lambda: server.objects("leases", "gpu-watchdog-controller"), what="the Lease", timeout=LEASE * 3,
                   every=0.05)
        assert server.objects("leases", "gpu-watchdog-controller")[0]["spec"]["holderIdentity"] == "solo"
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)


def test_settings_refuse_misordered_lease_timings():
    with pytest.raises(ValueError, match="renew_deadline"):
        ControllerSettings(lease_duration_seconds=5, renew_deadline_seconds=6)
    with pytest.raises(ValueError, match="1.2"):
        ControllerSettings(lease_duration_seconds=5, renew_deadline_seconds=2, retry_period_seconds=1.9)
    assert ControllerSettings().max_body_bytes == 1024 * 1024
