"""A real mosquitto broker on a free 127.0.0.1 port, startable and stoppable, plus a subscriber helper.

The broker keeps its port across stop/start so a test can kill it and bring it back where the publisher expects
it. ``persistence false``: a restarted broker has forgotten every retained message, like a broker that lost its
disk.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any, Callable

import aiomqtt

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
PREFIX = "test-gw"
START_LIMIT_SECONDS = 10.0
WAIT_LIMIT_SECONDS = 10.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Broker:
    def __init__(self, workdir: Path):
        self.port = free_port()
        self.config = workdir / "mosquitto.conf"
        self.log = workdir / "mosquitto.log"
        # `user`: mosquitto started as root otherwise switches to the 'mosquitto' user (mosquitto.conf(5)).
        self.config.write_text(
            "per_listener_settings false\n"
            f"listener {self.port} 127.0.0.1\n"
            "allow_anonymous true\n"
            "persistence false\n"
            f"user {getpass.getuser()}\n"
        )
        self._process: subprocess.Popen | None = None

    async def start(self) -> None:
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                [MOSQUITTO, "-c", str(self.config)], stdout=log, stderr=subprocess.STDOUT
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_LIMIT_SECONDS
        while loop.time() < deadline:  # bounded polling while the real server starts
            if self._process.poll() is not None:
                raise RuntimeError(f"mosquitto exited: {self.log.read_text()}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.02)
                continue
            writer.close()
            await writer.wait_closed()
            return
        raise RuntimeError(f"mosquitto did not accept connections: {self.log.read_text()}")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=10)
        self._process = None

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.stop()


class Subscriber:
    """An aiomqtt client subscribed to everything below a prefix, reading messages with a bounded wait."""

    def __init__(self, client: aiomqtt.Client):
        self.client = client
        self._messages = client.messages.__aiter__()

    async def next(self, match: Callable[[aiomqtt.Message, Any], bool] = lambda m, p: True) -> tuple[aiomqtt.Message, Any]:
        """The next message (topic, decoded JSON) that ``match`` accepts; others are skipped."""

        async def first_match() -> tuple[aiomqtt.Message, Any]:
            async for message in self._messages:
                payload = json.loads(message.payload)
                if match(message, payload):
                    return message, payload
            raise AssertionError("subscription ended")

        return await asyncio.wait_for(first_match(), timeout=WAIT_LIMIT_SECONDS)


def on_topic(topic: str, **fields: Any) -> Callable[[aiomqtt.Message, Any], bool]:
    return lambda m, p: m.topic.matches(topic) and all(p.get(k) == v for k, v in fields.items())


def tick_result(snapshot, *, before=None, actions=()):
    """The TickResult a cycle would hand the publisher for ``snapshot`` (findings changed since ``before``)."""
    from watchdog.model import ActionReport, TickResult, finding_changes

    changes = finding_changes(before.findings if before is not None else (), snapshot.findings)
    tick = snapshot.sample.tick if snapshot.sample is not None else 0
    return TickResult(tick=tick, snapshot=snapshot, changes=changes, actions=ActionReport(counted=tuple(actions)))


def action_record(result: str, reason: str, namespace: str, pod: str = "hog-7"):
    from watchdog.model import ActionRecord, EvictionResult, FindingKind, Mode

    return ActionRecord(result=EvictionResult(result), reason=reason, namespace=namespace, pod=pod,
                        finding_key=f"{reason}/tenant/{namespace}", finding_kind=FindingKind(reason)
                        if reason in set(FindingKind) else FindingKind.QUOTA, mode=Mode.DRY_RUN, timestamp=0.0)
