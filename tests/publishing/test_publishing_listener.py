"""The listener when every slot is busy with a request: probes get a reserve slot, other requests a 503, and an
answer the client does not read is abandoned rather than holding its slot."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from tests.connection_flood import BOUND, close, connect, get, read_response, request, until
from watchdog.publishing.listener import PROBE_RESERVE, LimitedListener


class App:
    """/hang waits for ``release``; /healthz answers at once; /big is larger than any socket buffer."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.hanging = 0

    async def hang(self, request: web.Request) -> web.Response:
        self.hanging += 1
        await self.release.wait()
        return web.Response(text="done\n")

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def big(self, request: web.Request) -> web.Response:
        return web.Response(body=b"x" * (64 * 1024 * 1024))

    def application(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/hang", self.hang)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/big", self.big)
        return app


@pytest.fixture
async def listen():
    listeners: list[LimitedListener] = []

    async def start(app: App, **options) -> tuple[LimitedListener, int]:
        listener = LimitedListener(app.application(), host="127.0.0.1", port=0, **options)
        listeners.append(listener)
        return listener, await listener.start()

    yield start
    for listener in listeners:
        await listener.stop()


async def hanging(port: int, *, source: str):
    reader, writer = await connect(port, source=source)
    writer.write(request("/hang"))
    return reader, writer


async def test_probes_get_a_reserve_slot_while_every_slot_is_busy_and_other_requests_a_503(listen):
    app = App()
    listener, port = await listen(app, idle_timeout=60, max_connections=2)
    busy = [await hanging(port, source=f"127.0.0.{10 + n}") for n in range(2)]
    try:
        await until(lambda: app.hanging == 2, what="both slots busy")
        assert await get(port, "/healthz", timeout=1.0) == (200, b"ok\n")
        status, body = await get(port, "/hang")
        assert status == 503 and b"only the health probes" in body
        assert app.hanging == 2 and listener.refused == 0
        app.release.set()
        for reader, _ in busy:
            assert await read_response(reader) == (200, b"done\n")
    finally:
        for _, writer in busy:
            await close(writer)


async def test_a_newcomer_is_refused_only_when_the_probe_reserve_is_busy_too(listen):
    app = App()
    listener, port = await listen(app, idle_timeout=60, max_connections=2,
                                  probe_paths=frozenset({"/healthz", "/hang"}))
    busy = [await hanging(port, source=f"127.0.0.{10 + n}") for n in range(2 + PROBE_RESERVE)]
    try:
        await until(lambda: app.hanging == 2 + PROBE_RESERVE, what="every slot and the reserve busy")
        reader, writer = await connect(port, source="127.0.0.99")
        try:
            assert await asyncio.wait_for(reader.read(), BOUND) == b""  # closed on arrival
        finally:
            await close(writer)
        assert listener.refused == 1
        app.release.set()
        for reader, _ in busy:
            assert (await read_response(reader))[0] == 200
        assert await get(port, "/healthz") == (200, b"ok\n")
    finally:
        for _, writer in busy:
            await close(writer)


async def test_one_client_with_every_connection_busy_is_refused_past_its_share(listen):
    app = App()
    listener, port = await listen(app, idle_timeout=60, max_connections=4)
    busy = [await hanging(port, source="127.0.0.10") for _ in range(2)]
    try:
        await until(lambda: app.hanging == 2, what="the client's share busy")
        reader, writer = await connect(port, source="127.0.0.10")
        try:
            assert await asyncio.wait_for(reader.read(), BOUND) == b""
        finally:
            await close(writer)
        assert listener.refused == 1
        assert await get(port, "/healthz", source="127.0.0.11") == (200, b"ok\n")  # others still get in
        app.release.set()
    finally:
        for _, writer in busy:
            await close(writer)


async def test_an_answer_the_client_does_not_read_is_abandoned_and_its_slot_freed(listen):
    listener, port = await listen(App(), idle_timeout=0.3, max_connections=2)
    reader, writer = await connect(port)
    try:
        writer.write(request("/big"))  # and never read
        await until(lambda: listener.abandoned == 1, what="the answer abandoned")
        await until(lambda: listener.connections == 0, what="its slot freed")
    finally:
        await close(writer)


async def test_a_client_gone_before_its_answer_costs_nothing_but_its_slot(listen, caplog):
    app = App()
    listener, port = await listen(app, idle_timeout=60, max_connections=2)
    _, writer = await hanging(port, source="127.0.0.10")
    await until(lambda: app.hanging == 1, what="the request in the handler")
    await close(writer)
    await until(lambda: listener.connections == 0, what="the slot freed")
    app.release.set()  # the handler finishes and answers a connection that is gone
    assert await get(port, "/healthz") == (200, b"ok\n")
    assert [record.getMessage() for record in caplog.records if record.levelname == "ERROR"] == []
