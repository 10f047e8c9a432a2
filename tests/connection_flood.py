"""Raw HTTP/1.1 over real sockets on loopback, for the tests that flood a server with idle connections and then
probe it: a client can pick its source address (any 127.x.y.z on Linux), so one test plays several peers."""

from __future__ import annotations

import asyncio
import contextlib

from tests.waiting import poll

BOUND = 10.0  # seconds: only keeps a broken build from hanging; nothing is asserted about durations


def request(path: str, *, keep_alive: bool = True) -> bytes:
    connection = b"" if keep_alive else b"Connection: close\r\n"
    return b"GET " + path.encode() + b" HTTP/1.1\r\nHost: watchdog\r\n" + connection + b"\r\n"


async def connect(port: int, *, source: str = "127.0.0.1") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)), BOUND)


async def read_response(reader: asyncio.StreamReader, *, timeout: float = BOUND) -> tuple[int, bytes]:
    """(status, body) of one response with a Content-Length."""
    async with asyncio.timeout(timeout):
        head = await reader.readuntil(b"\r\n\r\n")
        fields = dict(line.lower().split(b": ", 1) for line in head.split(b"\r\n")[1:] if b": " in line)
        body = await reader.readexactly(int(fields[b"content-length"]))
    return int(head.split(b" ", 2)[1]), body


async def get(port: int, path: str, *, source: str = "127.0.0.1", timeout: float = BOUND) -> tuple[int, bytes]:
    """One request on a new connection, all of it (connecting included) within ``timeout``."""
    async with asyncio.timeout(timeout):
        reader, writer = await connect(port, source=source)
        try:
            writer.write(request(path, keep_alive=False))
            return await read_response(reader)
        finally:
            await close(writer)


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


@contextlib.asynccontextmanager
async def idle_connections(port: int, count: int, *, source: str = "127.0.0.1"):
    """``count`` connections (reader, writer) that never send a byte, opened one after another; closed on exit."""
    opened: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        for _ in range(count):
            opened.append(await connect(port, source=source))
        yield opened
    finally:
        for _, writer in opened:
            await close(writer)


async def until(check, *, what: str) -> None:
    """Waits (bounded by BOUND) until ``check()`` holds: for state the server reaches a few loop turns later."""
    await poll(check, what=what, timeout=BOUND)
