"""Fixtures of the MQTT tests: a fresh mosquitto per test, subscribers on it, and publishers that are stopped."""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator, Callable

import aiomqtt
import pytest
from mqtt_broker import PREFIX, Broker, Subscriber

from watchdog.config.mqtt import MqttSettings
from watchdog.publishing.mqtt import MqttPublisher


@pytest.fixture
async def broker(tmp_path) -> AsyncIterator[Broker]:
    async with Broker(tmp_path) as server:
        yield server


@pytest.fixture
async def subscribe(broker) -> AsyncIterator[Callable]:
    """``await subscribe()`` → a Subscriber on '<prefix>/#' (QoS 1); every one is disconnected at the end."""
    async with contextlib.AsyncExitStack() as stack:

        async def connect(topic: str = f"{PREFIX}/#") -> Subscriber:
            client = await stack.enter_async_context(aiomqtt.Client("127.0.0.1", broker.port, timeout=5))
            await client.subscribe(topic, qos=1)
            return Subscriber(client)

        yield connect


class BackoffGate:
    """An injected ``sleep``: each reconnect wait is recorded, then held until the test releases it."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self._waiting = asyncio.Event()
        self._release = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)
        self._release.clear()
        self._waiting.set()
        await self._release.wait()

    async def wait_until_backing_off(self) -> None:
        await asyncio.wait_for(self._waiting.wait(), timeout=10)

    def release(self) -> None:
        self._waiting.clear()
        self._release.set()


@pytest.fixture
def gate() -> BackoffGate:
    return BackoffGate()


@pytest.fixture
async def start_publisher(broker, gate) -> AsyncIterator[Callable]:
    """``start_publisher(**settings)`` → a running MqttPublisher on the broker; its task is cancelled at the end."""
    tasks: list[asyncio.Task] = []

    def start(**overrides) -> MqttPublisher:
        fields = {
            "enabled": True,
            "host": "127.0.0.1",
            "port": broker.port,
            "topic_prefix": PREFIX,
            "timeout_seconds": 5,
            "reconnect_jitter": 0,
            "reconnect_initial_seconds": 0.1,
            "reconnect_max_seconds": 0.4,
            **overrides,
        }
        publisher = MqttPublisher(MqttSettings(**fields), node="node-a", clock=lambda: 1000.0, sleep=gate.sleep)
        tasks.append(asyncio.create_task(publisher.run(), name="mqtt-publisher"))
        return publisher

    yield start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
