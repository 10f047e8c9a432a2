"""The metrics server on real sockets: idle and half-sent connections are closed, and a flood of idle connections
neither starves the probes nor locks out the scraper."""

from __future__ import annotations

import asyncio

import pytest

from tests.connection_flood import BOUND, close, connect, get, idle_connections, read_response, request, until
from watchdog.publishing import MetricsServer

PROBE_TIMEOUT = 1.0  # seconds the client gives /healthz, as a kubelet's timeoutSeconds: 1 would


@pytest.fixture
async def serve(rich_snapshot):
    servers: list[MetricsServer] = []

    async def start(**limits) -> tuple[MetricsServer, int]:
        server = MetricsServer(lambda: rich_snapshot, alive=lambda: True, host="127.0.0.1", port=0, **limits)
        servers.append(server)
        return server, await server.start()

    yield start
    for server in servers:
        await server.stop()


async def test_a_connection_that_never_sends_a_request_is_closed(serve):
    _, port = await serve(idle_timeout=0.2)
    reader, writer = await connect(port)
    try:
        assert await asyncio.wait_for(reader.read(), BOUND) == b""  # EOF: the server closed it
    finally:
        await close(writer)


async def test_a_kept_alive_connection_is_closed_once_idle(serve):
    _, port = await serve(idle_timeout=0.2)
    reader, writer = await connect(port)
    try:
        writer.write(request("/healthz"))
        assert (await read_response(reader))[0] == 200
        assert await asyncio.wait_for(reader.read(), BOUND) == b""
    finally:
        await close(writer)


async def test_a_request_head_that_trickles_in_is_cut_off(serve):
    """Slowloris: a byte at a time, each well within the idle timeout, the head never complete."""
    _, port = await serve(idle_timeout=0.3)
    reader, writer = await connect(port)
    closed = asyncio.create_task(reader.read())
    try:
        for byte in b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 10_000:
            if closed.done():
                break
            writer.write(bytes([byte]))
            await asyncio.sleep(0.02)
        assert await asyncio.wait_for(closed, BOUND) == b""
    finally:
        closed.cancel()
        await close(writer)


@pytest.mark.parametrize("flooder", ["127.0.0.2", "127.0.0.1"], ids=["other-address", "probe's-address"])
async def test_probes_and_scrapes_are_answered_while_200_idle_connections_are_held(serve, flooder):
    server, port = await serve(idle_timeout=60)  # the defaults' cap: 32 connections
    scraper, scraper_writer = await connect(port, source="127.0.0.3")  # Prometheus keeps its connection alive
    try:
        scraper_writer.write(request("/metrics"))
        assert (await read_response(scraper))[0] == 200
        async with idle_connections(port, 200, source=flooder):
            assert await get(port, "/healthz", timeout=PROBE_TIMEOUT) == (200, b"ok\n")
            status, _ = await get(port, "/readyz", timeout=PROBE_TIMEOUT)
            assert status == 200
            status, body = await get(port, "/metrics")
            assert status == 200 and b"gpu_watchdog_" in body
            scraper_writer.write(request("/metrics"))  # the flood evicted its own connections, not the scraper's
            assert (await read_response(scraper))[0] == 200
            assert server.listener.connections <= 32
        assert server.listener.refused == 0
    finally:
        await close(scraper_writer)


async def test_one_client_holds_at_most_half_the_cap_and_loses_its_own_oldest_first(serve):
    server, port = await serve(idle_timeout=60, max_connections=4)
    other, other_writer = await connect(port, source="127.0.0.3")
    try:
        async with idle_connections(port, 3, source="127.0.0.2") as flood:
            await until(lambda: server.listener.evicted == 1, what="one eviction")
            (oldest, _), (second, second_writer), _ = flood
            assert await asyncio.wait_for(oldest.read(), BOUND) == b""  # its share of a cap of 4 is 2
            assert server.listener.connections == 3
            second_writer.write(request("/healthz"))
            assert (await read_response(second))[0] == 200
            other_writer.write(request("/healthz"))
            assert (await read_response(other))[0] == 200
    finally:
        await close(other_writer)


async def test_when_the_cap_is_reached_the_biggest_holders_oldest_idle_connection_goes(serve):
    server, port = await serve(idle_timeout=60, max_connections=4)
    scraper, scraper_writer = await connect(port, source="127.0.0.3")
    try:
        async with idle_connections(port, 2, source="127.0.0.2") as flood:
            async with idle_connections(port, 1, source="127.0.0.4"):
                await until(lambda: server.listener.connections == 4, what="the cap reached")
                assert await get(port, "/healthz", source="127.0.0.5") == (200, b"ok\n")
                assert server.listener.evicted == 1
                assert await asyncio.wait_for(flood[0][0].read(), BOUND) == b""
                scraper_writer.write(request("/metrics"))
                assert (await read_response(scraper))[0] == 200
    finally:
        await close(scraper_writer)
