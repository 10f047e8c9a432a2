"""The fake API server and a real kubernetes.aio client on it, one of each per test: the fixtures of every test
directory that talks to the Kubernetes API (a conftest imports them)."""

from __future__ import annotations

import pytest

from watchdog.kube.client import KubeApi
from watchdog.testbed.cluster.apiserver import FakeApiServer


@pytest.fixture
async def server():
    async with FakeApiServer() as fake:
        yield fake


@pytest.fixture
async def api(server):
    async with KubeApi.from_url(server.url, timeout=5) as client:
        yield client
