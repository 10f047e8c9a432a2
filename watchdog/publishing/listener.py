"""Serves an aiohttp application with the limits a long-running pod needs, without letting anyone who can open TCP
connections starve the liveness and readiness probes.

aiohttp's AppRunner keeps a connection that never sends a request, or stops between requests, for its
``keepalive_timeout``, which defaults to 3,630 s in aiohttp 3.14 (web_protocol.RequestHandler); nor does it cap
connections. Here:

- the keep-alive timeout is the idle timeout, and the listener keeps its own deadline besides: a connection must
  bring a complete request head within ``idle_timeout`` of arriving or of its last answer, so one that sends
  nothing or trickles its headers (slowloris) is closed; a TLS handshake gets the same time;
- an answer the client does not take within ``idle_timeout`` (it stopped reading) is abandoned and its connection
  closed, so a request cannot hold a slot forever either;
- the number of connections is capped, and who is closed when the cap is reached is decided by admission.py: idle
  connections first, one client at most half the cap, and a few extra slots that answer only the probe paths while
  every other slot is busy, so a probe always finds a slot.

Only public aiohttp API is used: the runner's protocol factory (``runner.server``), ``request.protocol``, a
middleware, served through ``loop.create_server``.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Awaitable, Callable

from aiohttp import web

from watchdog.publishing.admission import ConnectionTable, Verdict

log = logging.getLogger(__name__)

PROBE_PATHS = frozenset({"/healthz", "/readyz"})
# Extra slots for probes while every other slot is busy: liveness and readiness, twice over. The kubelet's HTTP
# prober disables keep-alive (kubernetes pkg/probe/http: DisableKeepAlives), so each probe is a new connection.
PROBE_RESERVE = 4


class _Connection(asyncio.Protocol):
    """Stands between one transport and aiohttp's protocol: admitted (or refused) first, then passed through."""

    def __init__(self, listener: LimitedListener, handler: asyncio.Protocol) -> None:
        self._listener = listener
        self._handler: asyncio.Protocol | None = handler
        self._transport: asyncio.BaseTransport | None = None
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        handler, self._handler = self._handler, None  # a refused connection never reaches aiohttp
        if not self._listener.admit(self, handler, transport):
            transport.close()
            return
        self._transport, self._handler = transport, handler
        self.arm_deadline()
        handler.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm_deadline()
        self._listener.forget(self)
        if self._handler is not None:
            self._handler.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._handler is not None:
            self._handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self._handler.eof_received() if self._handler is not None else None

    def pause_writing(self) -> None:
        if self._handler is not None:
            self._handler.pause_writing()

    def resume_writing(self) -> None:
        if self._handler is not None:
            self._handler.resume_writing()

    @property
    def handler(self) -> asyncio.Protocol | None:
        return self._handler

    def abort(self) -> None:
        """Closes the connection at once, dropping whatever is still unsent."""
        if isinstance(self._transport, asyncio.WriteTransport):
            self._transport.abort()
        elif self._transport is not None:
            self._transport.close()

    def arm_deadline(self) -> None:
        """A complete request head must arrive within the idle timeout from now."""
        self.disarm_deadline()
        self._deadline = asyncio.get_running_loop().call_later(self._listener.idle_timeout, self._expire)

    def disarm_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self._listener.is_idle(self):
            self.abort()


class LimitedListener:
    """``port = await start()``, then ``await stop()``; ``refused`` counts connections closed on arrival, ``evicted``
    idle connections closed to make room, ``abandoned`` answers the client did not take in time."""

    def __init__(
        self,
        app: web.Application,
        *,
        host: str,
        port: int,
        idle_timeout: float,
        max_connections: int,
        ssl_context: ssl.SSLContext | None = None,
        shutdown_timeout: float = 1.0,
        probe_paths: frozenset[str] = PROBE_PATHS,
    ) -> None:
        if idle_timeout <= 0 or max_connections < 1:
            raise ValueError(f"idle_timeout must be positive and max_connections at least 1, got idle_timeout="
                             f"{idle_timeout}, max_connections={max_connections}")
        self._app = app
        self._host, self._port = host, port
        self.idle_timeout = idle_timeout
        self._ssl_context = ssl_context
        self._shutdown_timeout = shutdown_timeout
        self._probe_paths = probe_paths
        self._table: ConnectionTable[_Connection] = ConnectionTable(
            capacity=max_connections, per_client=max(1, max_connections // 2), probe_reserve=PROBE_RESERVE)
        self._by_handler: dict[asyncio.Protocol, _Connection] = {}
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self.refused = 0
        self.evicted = 0
        self.abandoned = 0

    @property
    def connections(self) -> int:
        """Connections being served now."""
        return len(self._table)

    async def start(self) -> int:
        """Bind and serve; returns the bound port (the free one chosen when port was 0)."""
        if self._runner is not None:
            raise RuntimeError("already started")
        self._app.middlewares.insert(0, self._track)  # outermost: it sees the final answer and sends it
        runner = web.AppRunner(self._app, access_log=None, keepalive_timeout=self.idle_timeout,
                               shutdown_timeout=self._shutdown_timeout)
        await runner.setup()
        self._runner = runner  # before the first accept, which can come before create_server returns
        try:
            self._server = await asyncio.get_running_loop().create_server(
                self._protocol, self._host, self._port, ssl=self._ssl_context, reuse_address=True,
                ssl_handshake_timeout=self.idle_timeout if self._ssl_context is not None else None,
            )
        except BaseException:
            self._runner = None
            await runner.cleanup()
            raise
        return self._server.sockets[0].getsockname()[1]

    def _protocol(self) -> asyncio.BaseProtocol:
        server = self._runner.server if self._runner is not None else None
        if server is None:  # stopping
            return _Refusing()
        return _Connection(self, server())

    def admit(self, connection: _Connection, handler: asyncio.Protocol, transport: asyncio.BaseTransport) -> bool:
        """Called by a new connection: whether it is served; closes the idle connections that make room for it."""
        if self._runner is None:
            return False
        peer = transport.get_extra_info("peername")
        admission = self._table.admit(connection, str(peer[0]) if isinstance(peer, tuple) and peer else "")
        for victim in admission.evict:
            victim.abort()  # idle: its answers are out, and a TLS goodbye would keep the socket for seconds more
            self.evicted += 1
            _log_sometimes(self.evicted, "%s:%s: %d idle connection(s) closed to make room (cap %d, %d per client)",
                           self._host, self._port, self.evicted, self._table.capacity, self._table.per_client)
        if admission.verdict is Verdict.REFUSE:
            self.refused += 1
            _log_sometimes(self.refused, "%s:%s: %d connection(s) refused: every slot busy (cap %d + %d for probes)",
                           self._host, self._port, self.refused, self._table.capacity, self._table.probe_reserve)
            return False
        self._by_handler[handler] = connection
        return True

    def forget(self, connection: _Connection) -> None:
        """Called by a connection when it closes."""
        self._table.forget(connection)
        if connection.handler is not None:
            self._by_handler.pop(connection.handler, None)

    def is_idle(self, connection: _Connection) -> bool:
        return self._table.idle(connection)

    @web.middleware
    async def _track(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        connection = self._by_handler.get(request.protocol)
        if connection is None or connection not in self._table:
            return await handler(request)
        probes_only = self._table.probes_only(connection)
        connection.disarm_deadline()
        self._table.started(connection)
        try:
            if probes_only and request.path not in self._probe_paths:
                response: web.StreamResponse = web.Response(
                    status=503, text="connection limit reached: only the health probes are answered now\n")
            else:
                response = await handler(request)
            if probes_only:
                response.force_close()  # a reserve slot serves one probe
            # Sent here, not after the middleware returns, so the connection counts as busy until its answer is out.
            try:
                async with asyncio.timeout(self.idle_timeout):
                    await response.prepare(request)
                    await response.write_eof()
            except TimeoutError:
                self.abandoned += 1
                _log_sometimes(self.abandoned, "%s:%s: %d answer(s) not taken within %g s; connection closed",
                               self._host, self._port, self.abandoned, self.idle_timeout)
                connection.abort()  # aiohttp then finds the transport gone and ends the connection quietly
            except ConnectionError:
                pass  # the client left; aiohttp's own send meets the same error and ends the connection quietly
            return response
        finally:
            self._table.finished(connection)
            if connection in self._table:
                connection.arm_deadline()

    async def stop(self) -> None:
        server, self._server = self._server, None
        runner, self._runner = self._runner, None
        if server is not None:
            server.close()
        if runner is not None:
            await runner.cleanup()  # closes the connections still open


class _Refusing(asyncio.Protocol):
    """Takes a connection that arrives while the listener stops and closes it at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


def _log_sometimes(count: int, message: str, *args: object) -> None:
    if count in (1, 10, 100) or count % 1000 == 0:
        log.warning(message, *args)
