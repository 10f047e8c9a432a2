"""The MQTT publisher: a long-running agent that pushes the event stream to a broker, and survives its absence.

The agent cycle must never wait on a broker, so the cycle only *offers* events (a synchronous, non-blocking
enqueue) and this agent drains them on its own task. While the broker is away the bounded queue drops its oldest
events and counts them; the publisher reconnects with capped, jittered exponential backoff. The broker announces
a dead agent through the retained "offline" will registered at connect (MQTT 3.1.1 §3.1.2.5); a clean stop
publishes "offline" itself, since a graceful DISCONNECT discards the will (§3.14.4). TLS (CA, optional client
certificate) and the password are read at every connect, so rotated Secrets apply from the next connection.

Only this module imports aiomqtt (import-linter contract in pyproject.toml).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

import aiomqtt

from watchdog.config.mqtt import MqttSettings
from watchdog.model import Snapshot, TickResult
from watchdog.publishing.mqtt_events import events_for, offline_payload, topic_segment

log = logging.getLogger(__name__)

Message = tuple[str, bytes, bool]  # full topic, JSON body, retain

# An event whose publish failed this many connections in a row (say, one the broker refuses by size) is dropped,
# so one bad message cannot wedge the stream.
MAX_TRIES_PER_EVENT = 3


@dataclass(frozen=True, slots=True)
class MqttCounters:
    """What the exporter shows about the stream: totals since start, and the present state."""

    published: int
    dropped: int
    connect_failures: int
    queued: int
    connected: bool


def backoff_delay(attempt: int, *, settings: MqttSettings, rng: random.Random) -> float:
    """Wait before reconnect ``attempt`` (0-based): initial·2^attempt, capped, minus a random share (jitter)."""
    base = min(settings.reconnect_max_seconds, settings.reconnect_initial_seconds * 2 ** min(attempt, 32))
    return base * (1.0 - settings.reconnect_jitter * rng.random())


class MqttPublisher:
    """Publishes each tick's events (``tick_done``, a TickSink); ``run`` is the agent (a no-op when disabled)."""

    stage = "mqtt"

    def __init__(
        self,
        settings: MqttSettings,
        *,
        node: str,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        rng: random.Random | None = None,
    ):
        self._settings = settings
        self._node = node
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._base = f"{settings.topic_prefix}/{topic_segment(node)}"
        self._queue: asyncio.Queue[Message] = asyncio.Queue(maxsize=settings.queue_size)
        self._unsent: Message | None = None  # taken from the queue but not acknowledged: sent first after reconnect
        self._unsent_tries = 0
        self._status: dict[str, Any] | None = None  # latest full status, republished on every connect
        self._previous: Snapshot | None = None  # the last tick's snapshot: status is published when it changes
        self._published = 0
        self._dropped = 0
        self._connect_failures = 0
        self._connected = False

    @property
    def status_topic(self) -> str:
        return f"{self._base}/status"

    def counters(self) -> MqttCounters:
        queued = self._queue.qsize() + (1 if self._unsent is not None else 0)
        return MqttCounters(self._published, self._dropped, self._connect_failures, queued, self._connected)

    # ------------------------------------------------------------------------------------ the cycle's side

    def snapshot_counters(self) -> dict[str, int]:
        """The counters as the agent's snapshot (and so /metrics) carries them."""
        counters = self.counters()
        return {"published": counters.published, "dropped": counters.dropped,
                "connect_failures": counters.connect_failures, "connected": int(counters.connected)}

    def tick_done(self, result: TickResult) -> None:
        """Queue one tick's events; never blocks, never raises into the agent cycle."""
        if not self._settings.enabled:
            return
        try:
            events = events_for(result, previous=self._previous, now=self._clock())
            self._previous = result.snapshot
            for suffix, payload, retain in events:
                if suffix.endswith("/status"):
                    self._status = payload
                self._enqueue((f"{self._settings.topic_prefix}/{suffix}", _encode(payload), retain))
        except Exception:  # a bad result must cost events, not the cycle
            log.exception("could not build MQTT events; this cycle's events are lost")
            self._dropped += 1

    def _enqueue(self, message: Message) -> None:
        if self._queue.full():
            self._queue.get_nowait()  # drop the oldest: recent events are worth more than stale ones
            self._dropped += 1
        self._queue.put_nowait(message)

    # --------------------------------------------------------------------------------------- the agent

    async def run(self) -> None:
        """Connect, publish, reconnect on failure; returns only when cancelled (or at once when disabled)."""
        if not self._settings.enabled:
            return
        attempt = 0
        while True:
            try:
                async with self._client() as client:
                    self._connected = True
                    attempt = 0
                    log.info("MQTT connected to %s:%d", self._settings.host, self._settings.port)
                    await self._session(client)
            except (aiomqtt.MqttError, OSError) as exc:
                if self._connected:
                    log.warning("MQTT connection lost: %s", exc)
                else:
                    self._connect_failures += 1
                    log.warning("MQTT connect to %s:%d failed: %s", self._settings.host, self._settings.port, exc)
            except Exception:  # a bug here must not end the agent: log it, back off, try again
                log.exception("MQTT publisher failed; reconnecting")
                if not self._connected:
                    self._connect_failures += 1
            finally:
                self._connected = False
            await self._sleep(backoff_delay(attempt, settings=self._settings, rng=self._rng))
            attempt += 1

    def _client(self) -> aiomqtt.Client:
        password = None
        if self._settings.password_file:
            # Read at every connect so a rotated Secret is picked up; an unreadable file is an OSError → retry.
            password = Path(self._settings.password_file).read_text(encoding="utf-8").strip()
        will = aiomqtt.Will(
            self.status_topic, _encode(offline_payload(self._node, timestamp=None)), qos=self._settings.qos, retain=True
        )
        return aiomqtt.Client(
            self._settings.host,
            self._settings.port,
            tls_context=self._tls_context(),
            identifier=self._settings.client_id or f"gpu-watchdog-{topic_segment(self._node)}",
            username=self._settings.username,
            password=password,
            will=will,
            keepalive=self._settings.keepalive_seconds,
            timeout=self._settings.timeout_seconds,
        )

    def _tls_context(self) -> ssl.SSLContext | None:
        """Built at every connect, like the password, so renewed certificate files are picked up; an unreadable or
        invalid file is an OSError (ssl.SSLError is one): counted as a failed connect and retried."""
        settings = self._settings
        if not settings.tls:
            return None
        context = ssl.create_default_context(cafile=settings.ca_file)  # CERT_REQUIRED, hostname checked
        context.check_hostname = settings.tls_check_hostname
        if settings.cert_file:
            context.load_cert_chain(settings.cert_file, settings.key_file)
        return context

    async def _session(self, client: aiomqtt.Client) -> None:
        """One connection's life: announce "online", then drain the queue until the connection drops."""
        watcher = asyncio.ensure_future(_wait_for_disconnect(client))
        getter: asyncio.Future[Message] | None = None
        try:
            await self._publish(client, (self.status_topic, _encode(self._online_status()), True))
            while True:
                if self._unsent is None:
                    getter = asyncio.ensure_future(self._queue.get())
                    await asyncio.wait({getter, watcher}, return_when=asyncio.FIRST_COMPLETED)
                    if not getter.done():
                        watcher.result()  # raises the MqttError that ended the connection
                    self._unsent, self._unsent_tries, getter = getter.result(), 0, None
                self._unsent_tries += 1
                await self._publish(client, self._unsent)
                self._unsent = None
        except asyncio.CancelledError:
            await self._say_offline(client)
            raise
        except Exception:
            if self._unsent is not None and self._unsent_tries >= MAX_TRIES_PER_EVENT:
                log.warning("MQTT event to %s failed %d times; dropped", self._unsent[0], self._unsent_tries)
                self._unsent = None
                self._dropped += 1
            raise
        finally:
            if getter is not None:
                getter.cancel()
            if watcher.done() and not watcher.cancelled():
                watcher.exception()  # seen: the loop's "exception was never retrieved" would be noise
            watcher.cancel()

    async def _publish(self, client: aiomqtt.Client, message: Message) -> None:
        topic, body, retain = message
        await client.publish(topic, payload=body, qos=self._settings.qos, retain=retain)
        self._published += 1

    def _online_status(self) -> dict[str, Any]:
        if self._status is not None:
            return self._status
        return {**offline_payload(self._node, timestamp=self._clock()), "state": "online"}

    async def _say_offline(self, client: aiomqtt.Client) -> None:
        """On a clean stop, replace the retained status ourselves: the broker drops the will on DISCONNECT."""
        body = _encode(offline_payload(self._node, timestamp=self._clock()))
        try:
            await asyncio.wait_for(
                client.publish(self.status_topic, payload=body, qos=self._settings.qos, retain=True),
                timeout=self._settings.timeout_seconds,
            )
        except (aiomqtt.MqttError, OSError, asyncio.TimeoutError) as exc:
            log.info("MQTT 'offline' status not delivered on stop: %s", exc)


async def _wait_for_disconnect(client: aiomqtt.Client) -> None:
    """Returns never; raises MqttError when the connection drops (we subscribe to nothing, so no message comes)."""
    async for _ in client.messages:
        pass
    raise aiomqtt.MqttError("message stream ended")


def _encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), sort_keys=True, allow_nan=False).encode()
