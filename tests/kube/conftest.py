"""Fixtures for the Kubernetes layer: a fresh fake API server and a real kubernetes.aio client per test."""

from __future__ import annotations

import pytest

from watchdog.testbed.cluster.apiserver import FakeApiServer
from watchdog.kube.client import KubeApi


@pytest.fixture
async def server():
    async with FakeApiServer() as fake:
        yield fake


@pytest.fixture
async def api(server):
    async with KubeApi.from_url(server.url, timeout=5) as client:
        yield client
