"""MqttSettings validation, the reconnect backoff curve, and the publisher's offline side (no broker involved)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pydantic import ValidationError

from watchdog.config.mqtt import MqttSettings
from watchdog.model import Snapshot, TickResult
from watchdog.publishing.mqtt import MqttPublisher, backoff_delay


def test_defaults_leave_the_stream_off():
    settings = MqttSettings()
    assert (settings.enabled, settings.port, settings.qos, settings.topic_prefix) == (False, 1883, 1, "gpu-watchdog")
    assert all(field.description for field in MqttSettings.model_fields.values())


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"topic_prefix": "gw/+"}, "topic_prefix"),
        ({"topic_prefix": "gw/#"}, "topic_prefix"),
        ({"topic_prefix": "/gw"}, "topic_prefix"),
        ({"qos": 2}, "qos"),
        ({"port": 0}, "port"),
        ({"queue_size": 0}, "queue_size"),
        ({"reconnect_initial_seconds": 5, "reconnect_max_seconds": 1}, "reconnect_max_seconds"),
        ({"hostname": "typo"}, "hostname"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(fields, named):
    with pytest.raises(ValidationError, match=named):
        MqttSettings(**fields)


def test_nested_prefix_is_allowed():
    assert MqttSettings(topic_prefix="site-1/gpu-watchdog").topic_prefix == "site-1/gpu-watchdog"


def test_backoff_doubles_up_to_the_cap():
    settings = MqttSettings(reconnect_initial_seconds=1, reconnect_max_seconds=10, reconnect_jitter=0)
    rng = random.Random(0)
    assert [backoff_delay(n, settings=settings, rng=rng) for n in range(6)] == [1, 2, 4, 8, 10, 10]
    assert backoff_delay(10_000, settings=settings, rng=rng) == 10


def test_jitter_only_shortens_the_wait_by_at_most_its_share():
    settings = MqttSettings(reconnect_initial_seconds=4, reconnect_max_seconds=4, reconnect_jitter=0.25)
    delays = {backoff_delay(3, settings=settings, rng=random.Random(seed)) for seed in range(50)}
    assert all(3.0 <= delay <= 4.0 for delay in delays) and len(delays) > 1


async def test_offer_when_disabled_keeps_nothing_and_run_returns():
    publisher = MqttPublisher(MqttSettings(), node="node-a")
    publisher.tick_done(TickResult(tick=0, snapshot=Snapshot(node="node-a")))
    assert publisher.counters().queued == 0
    await publisher.run()  # returns at once: the stream is off


async def test_offer_drops_the_oldest_beyond_the_queue_and_counts():
    publisher = MqttPublisher(MqttSettings(enabled=True, queue_size=2), node="node-a", clock=lambda: 5.0)
    for tick in range(5):
        publisher.tick_done(TickResult(tick=tick, snapshot=Snapshot(node="node-a", ready=bool(tick % 2))))
    counters = publisher.counters()
    assert (counters.queued, counters.dropped, counters.published, counters.connected) == (2, 3, 0, False)


async def test_offer_never_raises_on_a_malformed_result():
    publisher = MqttPublisher(MqttSettings(enabled=True), node="node-a")
    malformed = TickResult(tick=0, snapshot=Snapshot(node="node-a"), changes=(("new", None),))  # type: ignore[arg-type]
    publisher.tick_done(malformed)
    assert publisher.counters().dropped == 1


def test_every_setting_is_documented():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "mqtt.md").read_text(encoding="utf-8")
    missing = [name for name in MqttSettings.model_fields if f"`{name}`" not in doc]
    assert missing == []
