"""Serves an aiohttp application with the limits a long-running pod needs: idle connections are closed and the
number of concurrent connections is capped.

aiohttp's AppRunner keeps a connection that never sends a request, or stops between requests, for its
``keepalive_timeout``, which defaults to 3,630 s in aiohttp 3.14 (web_protocol.RequestHandler); nor does it cap
connections. Half-open connections measured ≥ 330 s on the agent, and some 25,000 of them would reach a 256 Mi memory
limit (issue #9). Here the keep-alive timeout is the idle timeout (aiohttp arms it at connection_made too, so a
connection that sends nothing is covered), a TLS handshake gets the same time, and past ``max_connections`` a new
connection is closed as soon as it is accepted. Only public aiohttp API is used: the runner's protocol factory
(``runner.server``) and its ``connections``, served through ``loop.create_server``.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

from aiohttp import web

log = logging.getLogger(__name__)


class _Refused(asyncio.Protocol):
    """Takes a connection over the cap and closes it at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class LimitedListener:
    """``port = await start()``, then ``await stop()``; ``refused`` counts connections closed over the cap."""

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
    ) -> None:
        if idle_timeout <= 0 or max_connections < 1:
            raise ValueError("idle_timeout must be positive and max_connections at least 1")
        self._app = app
        self._host, self._port = host, port
        self._idle_timeout = idle_timeout
        self._max_connections = max_connections
        self._ssl_context = ssl_context
        self._shutdown_timeout = shutdown_timeout
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self.refused = 0

    @property
    def connections(self) -> int:
        """Connections being served now."""
        server = self._runner.server if self._runner is not None else None
        return len(server.connections) if server is not None else 0

    async def start(self) -> int:
        """Bind and serve; returns the bound port (the free one chosen when port was 0)."""
        if self._runner is not None:
            raise RuntimeError("already started")
        runner = web.AppRunner(self._app, access_log=None, keepalive_timeout=self._idle_timeout,
                               shutdown_timeout=self._shutdown_timeout)
        await runner.setup()
        self._runner = runner  # before the first accept, which can come before create_server returns
        try:
            self._server = await asyncio.get_running_loop().create_server(
                self._protocol, self._host, self._port, ssl=self._ssl_context, reuse_address=True,
                ssl_handshake_timeout=self._idle_timeout if self._ssl_context is not None else None,
            )
        except BaseException:
            self._runner = None
            await runner.cleanup()
            raise
        return self._server.sockets[0].getsockname()[1]

    def _protocol(self) -> asyncio.BaseProtocol:
        # aiohttp's factory registers each connection when it is made, so connections accepted in the same loop turn
        # can exceed the cap by that batch; the cap bounds memory, not an exact count.
        server = self._runner.server if self._runner is not None else None
        if server is None or len(server.connections) >= self._max_connections:
            self.refused += 1
            if self.refused in (1, 10, 100) or self.refused % 1000 == 0:
                log.warning("%s:%s: %d connection(s) refused over the cap of %d", self._host, self._port,
                            self.refused, self._max_connections)
            return _Refused()
        return server()

    async def stop(self) -> None:
        server, self._server = self._server, None
        runner, self._runner = self._runner, None
        if server is not None:
            server.close()
        if runner is not None:
            await runner.cleanup()  # closes the connections still open
