"""The one way a test gets a fake Kubernetes API server and real kubernetes.aio clients on it.

Every server and client a test asks for is closed when the test ends, clients before servers, so no test stops
them by hand and none leaks a listening socket. ``server`` and ``api`` (one default server, one client) cover most
tests; ``fake_api`` makes more, or a server with construction options (its own clock, a bearer token, instant
deletes): ``await fake_api.server(clock=...)``, ``await fake_api.client(server)``. tests/conftest.py hands these
fixtures to every test directory.
"""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator, Protocol

import pytest

from watchdog.kube.client import KubeApi
from watchdog.testbed.cluster.apiserver import FakeApiServer

CLIENT_TIMEOUT = 5.0  # seconds per request: only keeps a broken build from hanging


class HasUrl(Protocol):
    url: str


class FakeApi:
    """Starts fake API servers and opens clients on them for one test; its fixture closes them all at the end."""

    def __init__(self, stack: contextlib.AsyncExitStack) -> None:
        self._stack = stack

    async def server(self, **options: Any) -> FakeApiServer:
        """A started FakeApiServer; ``options`` are its constructor's (``clock``, ``token``, ``instant_deletes``…)."""
        return await self._stack.enter_async_context(FakeApiServer(**options))

    async def client(self, server: HasUrl, *, token: str | None = None, timeout: float = CLIENT_TIMEOUT) -> KubeApi:
        """A KubeApi on ``server``'s URL (a FakeApiServer's, or a proxy's in front of one), closed before any server
        is stopped."""
        return await self._stack.enter_async_context(KubeApi.from_url(server.url, token=token, timeout=timeout))


@pytest.fixture
async def fake_api() -> AsyncIterator[FakeApi]:
    async with contextlib.AsyncExitStack() as stack:
        yield FakeApi(stack)


@pytest.fixture
async def server(fake_api: FakeApi) -> FakeApiServer:
    return await fake_api.server()


@pytest.fixture
async def api(fake_api: FakeApi, server: FakeApiServer) -> KubeApi:
    return await fake_api.client(server)
