"""MqttPublisher against a real mosquitto: QoS-1 delivery, retained status, the will, reconnects and overflow."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import aiomqtt
import pytest
from mqtt_broker import PREFIX, action_record, on_topic, tick_result

from watchdog.model import Finding, FindingKind, NodeSample, PodRef, Severity, Snapshot

REPO = Path(__file__).resolve().parents[2]
STATUS = f"{PREFIX}/node-a/status"


def snapshot(tick: int, **fields) -> Snapshot:
    sample = NodeSample(node="node-a", tick=tick, timestamp=2000.0 + tick, gpus=())
    return Snapshot(node="node-a", sample=sample, **fields)


def quota_finding(tick: int) -> Finding:
    return Finding(
        kind=FindingKind.QUOTA,
        key="quota/tenant/b",
        domain="tenant/b",
        resource="memory",
        severity=Severity.CRITICAL,
        first_tick=tick,
        last_tick=tick,
        since=2000.0 + tick,
        culprit=PodRef("team-b", "hog-7"),
        evidence={"used_bytes": 9 << 30, "quota_bytes": 8 << 30},
    )


async def test_findings_actions_and_status_arrive_with_qos_1(start_publisher, subscribe):
    subscriber = await subscribe()
    publisher = start_publisher()
    await subscriber.next(on_topic(STATUS, state="online"))

    first = snapshot(1, ready=True)
    publisher.tick_done(tick_result(first))
    second = snapshot(2, ready=True, findings=(quota_finding(2),), evictions={("evicted", "quota", "team-b"): 1})
    publisher.tick_done(tick_result(second, before=first, actions=[action_record("evicted", "quota", "team-b")]))

    status, payload = await subscriber.next(on_topic(STATUS, tick=1))
    assert (status.qos, payload["ready"], payload["mode"]) == (1, True, "dry-run")
    found, payload = await subscriber.next(on_topic(f"{PREFIX}/node-a/findings/quota"))
    assert (found.qos, payload["event"], payload["culprit"]["name"], payload["tick"]) == (1, "new", "hog-7", 2)
    action, payload = await subscriber.next(on_topic(f"{PREFIX}/node-a/actions"))
    assert (action.qos, payload["result"], payload["namespace"], payload["count"]) == (1, "evicted", "team-b", 1)
    assert payload["pod"] == "hog-7"

    late = await subscribe()  # a subscriber arriving later still learns the agent's status: it is retained
    retained, payload = await late.next(on_topic(STATUS))
    assert (retained.retain, payload["state"], payload["tick"]) == (True, "online", 1)
    counters = publisher.counters()
    assert (counters.published, counters.dropped, counters.connect_failures, counters.connected) == (4, 0, 0, True)


async def test_a_clean_stop_leaves_a_retained_offline_status(start_publisher, subscribe):
    subscriber = await subscribe()
    publisher = start_publisher()
    await subscriber.next(on_topic(STATUS, state="online"))
    task = next(t for t in asyncio.all_tasks() if t.get_name() == "mqtt-publisher")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    _, payload = await subscriber.next(on_topic(STATUS, state="offline"))
    assert payload["timestamp"] == 1000.0  # the publisher's own clock: it said so itself
    retained, _ = await (await subscribe()).next(on_topic(STATUS))
    assert retained.retain and publisher.counters().connected is False


async def test_the_broker_publishes_the_will_when_the_agent_dies(broker, subscribe):
    subscriber = await subscribe()
    script = (
        "import asyncio, sys\n"
        "from watchdog.config.mqtt import MqttSettings\n"
        "from watchdog.publishing.mqtt import MqttPublisher\n"
        "settings = MqttSettings(enabled=True, host='127.0.0.1', port=int(sys.argv[1]), topic_prefix=sys.argv[2])\n"
        "asyncio.run(MqttPublisher(settings, node='node-dies').run())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    agent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, str(broker.port), PREFIX, cwd=REPO, env=env
    )
    try:
        await subscriber.next(on_topic(f"{PREFIX}/node-dies/status", state="online"))
        agent.kill()  # no DISCONNECT: the broker sees the socket close and sends the will
        await agent.wait()
        _, will = await subscriber.next(on_topic(f"{PREFIX}/node-dies/status", state="offline"))
    finally:
        if agent.returncode is None:
            agent.kill()
            await agent.wait()
    assert will == {"schema": 1, "node": "node-dies", "tick": None, "timestamp": None, "state": "offline"}
    retained, _ = await (await subscribe()).next(on_topic(f"{PREFIX}/node-dies/status"))
    assert retained.retain


async def test_reconnects_with_capped_backoff_after_the_broker_restarts(broker, start_publisher, subscribe, gate):
    subscriber = await subscribe()
    publisher = start_publisher()
    await subscriber.next(on_topic(STATUS, state="online"))

    broker.stop()
    with pytest.raises(aiomqtt.MqttError):  # the subscriber sees the broker go too
        await subscriber.next()
    await gate.wait_until_backing_off()
    for _ in range(3):  # three reconnects into a dead port
        gate.release()
        await gate.wait_until_backing_off()
    assert gate.delays == [0.1, 0.2, 0.4, 0.4]
    assert (publisher.counters().connect_failures, publisher.counters().connected) == (3, False)

    publisher.tick_done(tick_result(snapshot(9, paused=True)))  # offered while away: kept, then delivered
    await broker.start()
    fresh = await subscribe()
    gate.release()
    _, online = await fresh.next(on_topic(STATUS, state="online"))
    assert (online["paused"], online["tick"]) == (True, 9)  # the latest status, not a bare "online"

    publisher.tick_done(tick_result(snapshot(10, paused=True, evictions={("dry_run", "quota", "team-b"): 1}),
                                    actions=[action_record("dry_run", "quota", "team-b")]))
    _, action = await fresh.next(on_topic(f"{PREFIX}/node-a/actions"))
    assert (action["result"], action["count"], action["total"], action["tick"]) == ("dry_run", 1, 1, 10)
    assert publisher.counters().connected is True


async def test_overflow_while_the_broker_is_down_drops_the_oldest(broker, start_publisher, subscribe, gate):
    broker.stop()
    publisher = start_publisher(queue_size=3)
    await gate.wait_until_backing_off()
    assert publisher.counters().connect_failures == 1

    publisher.tick_done(tick_result(snapshot(0)))  # the first tick's status
    for total in range(1, 7):  # then six action events into a queue of three
        current = snapshot(total, evictions={("evicted", "interference", "team-b"): total})
        publisher.tick_done(tick_result(current, actions=[action_record("evicted", "interference", "team-b")]))
    counters = publisher.counters()
    assert (counters.queued, counters.dropped) == (3, 4)

    await broker.start()
    subscriber = await subscribe()
    gate.release()
    totals = [(await subscriber.next(on_topic(f"{PREFIX}/node-a/actions")))[1]["total"] for _ in range(3)]
    assert totals == [4, 5, 6]  # in order, and the first three are gone
    counters = publisher.counters()
    assert (counters.queued, counters.dropped, counters.published) == (0, 4, 4)  # + the "online" status


async def test_an_unreadable_password_file_is_a_counted_connect_failure(start_publisher, gate, tmp_path):
    publisher = start_publisher(username="agent", password_file=str(tmp_path / "missing"))
    await gate.wait_until_backing_off()
    counters = publisher.counters()
    assert (counters.connect_failures, counters.connected, counters.published) == (1, False, 0)
