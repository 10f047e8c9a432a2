"""The HTTP server: /metrics in both formats (and gzip), /healthz, /readyz, start/stop on a real port."""

from __future__ import annotations

import dataclasses
import gzip

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from watchdog.config.publishing import PublishingSettings
from watchdog.model import Snapshot
from watchdog.publishing import MetricsServer, render
from watchdog.publishing.render import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE


class Agent:
    """Stands in for the service: holds the latest snapshot and whether its loop is alive."""

    def __init__(self, snapshot: Snapshot | None) -> None:
        self.snapshot = snapshot
        self.alive = True

    def latest(self) -> Snapshot | None:
        return self.snapshot

    def is_alive(self) -> bool:
        return self.alive


@pytest.fixture
def agent(rich_snapshot):
    return Agent(rich_snapshot)


@pytest.fixture
async def client(agent):
    server = MetricsServer(agent.latest, alive=agent.is_alive, host="127.0.0.1", port=0)
    test_client = TestClient(TestServer(server.make_app()))
    await test_client.start_server()
    test_client.metrics_server = server
    yield test_client
    await test_client.close()


async def test_metrics_text_by_default(client, rich_snapshot):
    response = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
    assert response.status == 200
    assert response.headers["Content-Type"] == TEXT_CONTENT_TYPE
    assert "Accept" in response.headers["Vary"]
    assert await response.read() == render(rich_snapshot, False)


async def test_metrics_openmetrics_when_asked(client, rich_snapshot):
    accept = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
    response = await client.get("/metrics", headers={"Accept": accept, "Accept-Encoding": "identity"})
    assert response.status == 200
    assert response.headers["Content-Type"] == OPENMETRICS_CONTENT_TYPE
    assert await response.read() == render(rich_snapshot, True)


async def test_metrics_gzip_when_accepted(client, rich_snapshot):
    response = await client.get("/metrics", headers={"Accept-Encoding": "gzip"}, auto_decompress=False)
    assert response.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(await response.read()) == render(rich_snapshot, False)


async def test_repeated_scrapes_reuse_the_rendered_body(client, agent):
    for _ in range(3):
        assert (await client.get("/metrics")).status == 200
    assert client.metrics_server.exposition.renders == 1
    agent.snapshot = dataclasses.replace(agent.snapshot, ready=False)
    body = await (await client.get("/metrics")).read()
    assert b'gpu_watchdog_ready{node="node-a"} 0.0' in body
    assert client.metrics_server.exposition.renders == 2


async def test_metrics_without_snapshot_is_503(client, agent):
    agent.snapshot = None
    assert (await client.get("/metrics")).status == 503


async def test_a_broken_snapshot_costs_one_scrape_not_the_server(client, agent, rich_snapshot):
    agent.snapshot = "not a snapshot"
    response = await client.get("/metrics")
    assert response.status == 500
    assert client.metrics_server.scrape_failures == 1
    agent.snapshot = rich_snapshot
    assert (await client.get("/metrics")).status == 200


async def test_healthz_follows_the_agent_loop(client, agent):
    assert (await client.get("/healthz")).status == 200
    agent.alive = False
    assert (await client.get("/healthz")).status == 503
    agent.alive = True
    assert (await client.get("/healthz")).status == 200


async def test_healthz_is_503_when_the_check_raises(rich_snapshot):
    def broken():
        raise RuntimeError("loop state unreadable")

    server = MetricsServer(lambda: rich_snapshot, alive=broken, port=0)
    async with TestClient(TestServer(server.make_app())) as test_client:
        assert (await test_client.get("/healthz")).status == 503


async def test_readyz_waits_for_the_first_full_sample(client, agent):
    agent.snapshot = Snapshot(node="node-a", ready=False)
    assert (await client.get("/readyz")).status == 503
    agent.snapshot = None
    assert (await client.get("/readyz")).status == 503
    agent.snapshot = Snapshot(node="node-a", ready=True)
    assert (await client.get("/readyz")).status == 200


async def test_real_port_start_stop(agent, rich_snapshot):
    settings = PublishingSettings(host="127.0.0.1", port=0, gzip=True)
    server = MetricsServer.from_settings(settings, snapshot_provider=agent.latest, alive=agent.is_alive)
    port = await server.start()
    try:
        assert port > 0
        with pytest.raises(RuntimeError, match="already started"):
            await server.start()
        async with aiohttp.ClientSession() as session:
            async with session.get(
                f"http://127.0.0.1:{port}/metrics", headers={"Accept": "application/openmetrics-text"}
            ) as response:
                assert response.status == 200
                assert response.headers["Content-Encoding"] == "gzip"  # aiohttp asks for gzip by default
                body = await response.read()  # one gzip member: process_* first, then the cached snapshot body
                assert body.startswith(b"# HELP process_") and body.endswith(render(rich_snapshot, True))
            async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                assert response.status == 200
            async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                assert response.status == 200
    finally:
        await server.stop()
    await server.stop()  # idempotent
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.get(f"http://127.0.0.1:{port}/healthz")


async def test_gzip_by_default_only_when_asked(agent, rich_snapshot):
    server = MetricsServer.from_settings(PublishingSettings(host="127.0.0.1", port=0, process_metrics=False),
                                         snapshot_provider=agent.latest, alive=agent.is_alive)
    port = await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                assert response.headers["Content-Encoding"] == "gzip"  # aiohttp asks, as Prometheus does
                assert await response.read() == render(rich_snapshot, False)
            async with session.get(f"http://127.0.0.1:{port}/metrics",
                                   headers={"Accept-Encoding": "identity"}) as response:
                assert "Content-Encoding" not in response.headers
                assert await response.read() == render(rich_snapshot, False)
    finally:
        await server.stop()


async def test_gzip_can_be_switched_off(rich_snapshot):
    server = MetricsServer(lambda: rich_snapshot, alive=lambda: True, gzip=False)
    async with TestClient(TestServer(server.make_app())) as test_client:
        response = await test_client.get("/metrics", headers={"Accept-Encoding": "gzip"}, auto_decompress=False)
        assert "Content-Encoding" not in response.headers
        assert await response.read() == render(rich_snapshot, False)


def test_bad_port_is_refused():
    with pytest.raises(ValueError, match="port"):
        MetricsServer(lambda: None, alive=lambda: True, port=70000)
