"""The metrics server on real sockets: idle connections are closed, and connections past the cap are refused."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from watchdog.publishing import MetricsServer

BOUND = 10.0  # seconds: only keeps a broken build from hanging; nothing is asserted about durations
GET = b"GET /healthz HTTP/1.1\r\nHost: agent\r\n\r\n"


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


@contextlib.asynccontextmanager
async def connection(port: int):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def read_response(reader: asyncio.StreamReader) -> bytes:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), BOUND)
    fields = dict(line.lower().split(b": ", 1) for line in head.split(b"\r\n")[1:] if b": " in line)
    length = int(fields[b"content-length"])
    return head + await asyncio.wait_for(reader.readexactly(length), BOUND)


async def test_a_connection_that_never_sends_a_request_is_closed(serve):
    _, port = await serve(idle_timeout=0.2)
    async with connection(port) as (reader, _):
        assert await asyncio.wait_for(reader.read(), BOUND) == b""  # EOF: the server closed it


async def test_a_kept_alive_connection_is_closed_once_idle(serve):
    _, port = await serve(idle_timeout=0.2)
    async with connection(port) as (reader, writer):
        writer.write(GET)
        assert (await read_response(reader)).startswith(b"HTTP/1.1 200 ")
        assert await asyncio.wait_for(reader.read(), BOUND) == b""


async def test_connections_past_the_cap_are_closed_and_the_others_still_served(serve):
    server, port = await serve(idle_timeout=60, max_connections=2)
    async with connection(port) as (first, first_writer), connection(port) as _:
        for _ in range(int(BOUND / 0.01)):  # bounded wait until the server has registered both
            if server.listener.connections == 2:
                break
            await asyncio.sleep(0.01)
        assert server.listener.connections == 2
        async with connection(port) as (third, _):
            assert await asyncio.wait_for(third.read(), BOUND) == b""  # closed on arrival, before any request
        assert server.listener.refused == 1
        first_writer.write(GET)
        assert (await read_response(first)).startswith(b"HTTP/1.1 200 ")
