"""Real Controllers against the fake API server: one firing evicts once across a failover, a clean stop releases
the Lease, the cluster-wide token bucket paces distinct tenants on an injected clock, and /metrics reports it all.

Real time is only spent polling for a Lease to be taken (bounded); pacing runs on the injected clock.
"""

from __future__ import annotations

import io
import shutil
import subprocess
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
from watchdog.testbed import SimClock

LEASE, RENEW, RETRY = 2.0, 1.5, 0.2
TOKEN = "replica-token"
GPU = {"nvidia.com/gpu": "1"}
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
POD_CREATION = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc).timestamp()


class Cluster:
    """A fake API server and the controller replicas started against it, all stopped by `close()`."""

    def __init__(self, tmp_path, fake_api: FakeApi, server: FakeApiServer) -> None:
        self.token = tmp_path / "token"
        self.token.write_text(TOKEN)
        self.fake_api = fake_api
        self.server = server
        self.controllers: list[Controller] = []

    async def replica(self, identity: str, *, clock=None, **settings) -> Controller:
        options = dict(listen_host="127.0.0.1", listen_port=0, plain_http=True, token_file=str(self.token),
                       identity=identity,
                       lease_duration_seconds=LEASE, renew_deadline_seconds=RENEW, retry_period_seconds=RETRY,
                       cluster_evictions_per_minute=600, cluster_eviction_burst=5)
        api = await self.fake_api.client(self.server)
        extra = {"clock": clock} if clock is not None else {}
        controller = Controller(ControllerSettings(**{**options, **settings}), api=api,
                                policy=ActionPolicy(mode="enforce", tenant_cooldown_seconds=0),
                                audit=AuditLog(stream=io.StringIO()), namespace="gpu-watchdog", **extra)
        await controller.start()
        self.controllers.append(controller)
        return controller

    def eviction_posts(self) -> list[str]:
        return [path for method, path, query in self.server.requests
                if method == "POST" and path.endswith("/eviction") and "dryRun" not in query]

    def lease_holder(self) -> str:
        return self.server.objects("leases", "gpu-watchdog-controller")[0]["spec"]["holderIdentity"]  # lease_namespace

    async def close(self) -> None:
        for controller in self.controllers:
            await controller.stop()


@pytest.fixture
async def cluster(tmp_path, fake_api: FakeApi):
    made: list[Cluster] = []

    async def make(**server_options) -> Cluster:
        # Pods are created an hour before the alerts' startsAt (controller_payloads), on the fake's clock: a pod
        # created after a firing started is never its candidate.
        server = await fake_api.server(clock=lambda: POD_CREATION, **server_options)
        built = Cluster(tmp_path, fake_api, server)
        made.append(built)
        return built

    try:
        yield make
    finally:
        for built in made:
            await built.close()


def samples(exposition: str) -> dict[str, float]:
    """series (name with its sorted labels, as written) → value, from a text or OpenMetrics body."""
    parsed = {}
    for line in exposition.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            parsed[series] = float(value)
    return parsed


async def post(session, controller: Controller, data: bytes) -> tuple[int, dict]:
    async with session.post(f"{controller.url}/api/v1/alertmanager", data=data, headers=HEADERS) as response:
        return response.status, await response.json()


async def two_replicas(cluster) -> tuple[Controller, Controller]:
    a, b = await cluster.replica("replica-a"), await cluster.replica("replica-b")
    await poll(lambda: a.is_leader or b.is_leader, what="a leader", timeout=LEASE * 3, every=0.05)
    return (a, b) if a.is_leader else (b, a)


@pytest.mark.parametrize("instant_deletes", [True, False], ids=["pod-already-gone", "pod-terminating"])
async def test_one_firing_evicts_one_pod_across_a_failover(cluster, instant_deletes):
    cluster = await cluster(instant_deletes=instant_deletes)
    for name in ("a", "b", "c"):
        cluster.server.add_pod(namespace="team-b", name=name, priority=1, requests=GPU)
    leader, follower = await two_replicas(cluster)
    firing = body(alert(pod=None))  # namespace-only: the controller picks the tenant's pod
    async with aiohttp.ClientSession() as session:
        status, answer = await post(session, leader, firing)
        assert status == 200 and answer["results"][0]["result"] == "evicted"
        await leader.stop_electing()  # crashes: no release, the follower waits the Lease out
        await poll(lambda: follower.is_leader, what="the follower to lead", timeout=LEASE * 3, every=0.05)
        # Alertmanager's repeat of the same firing (same fingerprint and startsAt) reaches the new leader.
        status, answer = await post(session, follower, firing)
        assert status == 200 and answer["results"][0]["result"] in ("duplicate", "already_evicted")
        if instant_deletes:  # nothing terminating to see: only the shared record stops a second eviction
            assert answer["results"][0]["result"] == "duplicate"
    assert len(cluster.eviction_posts()) == 1


async def test_a_stopped_leader_releases_the_lease(cluster):
    cluster = await cluster()
    leader, follower = await two_replicas(cluster)
    await leader.stop()
    assert cluster.lease_holder() in ("", follower.identity)  # released: nobody waits for it to expire
    assert not leader.is_leader
    await poll(lambda: follower.is_leader, what="the follower to lead", timeout=LEASE * 3, every=0.05)


async def test_cluster_wide_token_bucket_paces_distinct_tenants(cluster):
    cluster = await cluster()
    clock = SimClock(10_000.0)
    for index in range(3):
        cluster.server.add_pod(namespace=f"tenant-{index}", name="job", requests=GPU)
    controller = await cluster.replica("solo", clock=clock, cluster_evictions_per_minute=1,
                                       cluster_eviction_burst=2)
    await poll(lambda: controller.is_leader, what="the controller to lead", timeout=LEASE * 3, every=0.05)
    alerts = [alert(namespace=f"tenant-{i}", pod=None, fingerprint=f"fp-{i}") for i in range(3)]
    async with aiohttp.ClientSession() as session:
        status, answer = await post(session, controller, body(*alerts))
        assert status == 200
        assert [r["result"] for r in answer["results"]] == ["evicted", "evicted", "rate_limited"]
        clock.advance(30)  # half a token refilled
        status, answer = await post(session, controller, body(alerts[2]))
        assert answer["results"][0]["result"] == "rate_limited"
        clock.advance(30)  # one whole token: the redelivery goes through
        status, answer = await post(session, controller, body(alerts[2]))
        assert answer["results"][0]["result"] == "evicted"
    assert sorted(cluster.eviction_posts()) == [f"/api/v1/namespaces/tenant-{i}/pods/job/eviction" for i in range(3)]


async def test_metrics_report_evictions_leadership_and_webhook_answers(cluster):
    cluster = await cluster()
    cluster.server.add_pod(namespace="team-b", name="batch", requests=GPU)
    leader, follower = await two_replicas(cluster)
    async with aiohttp.ClientSession() as session:
        assert (await post(session, follower, body(alert())))[0] == 503
        assert (await post(session, leader, body(alert())))[0] == 200
        async with session.get(f"{leader.url}/metrics") as response:
            assert response.status == 200 and response.content_type == "text/plain"
            text = await response.text()
        async with session.get(f"{follower.url}/metrics",
                               headers={"Accept": "application/openmetrics-text; version=1.0.0"}) as response:
            openmetrics = await response.text()
    scraped, scraped_openmetrics = samples(text), samples(openmetrics)
    assert scraped['gpu_watchdog_evictions_total{namespace="team-b",reason="alert",result="evicted"}'] == 1
    assert scraped["gpu_watchdog_controller_leader"] == 1 and scraped["gpu_watchdog_evictions_paused"] == 0
    assert scraped['gpu_watchdog_controller_webhook_requests_total{code="200"}'] == 1
    assert any(name.startswith("gpu_watchdog_build_info{") for name in scraped)
    assert scraped_openmetrics["gpu_watchdog_controller_leader"] == 0
    assert scraped_openmetrics['gpu_watchdog_controller_webhook_requests_total{code="503"}'] == 1
    assert openmetrics.endswith("# EOF\n")
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is needed to lint the exposition"
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_docs_list_the_controller_families():
    from pathlib import Path

    from watchdog.publishing.controller_metrics import CONTROLLER_FAMILIES

    doc = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
    rows = {}
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("| controller `gpu_watchdog_"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            labels = tuple(label.strip() for label in cells[3].strip("`").split(",") if label.strip())
            rows[cells[0].split("`")[1]] = (cells[1], labels)
    assert rows == {spec.name: (spec.kind, spec.labels) for spec in CONTROLLER_FAMILIES}
