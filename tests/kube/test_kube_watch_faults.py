"""PodWatcher against watch streams that misbehave without an HTTP error: streams that end at once, streams that
stall half-open, and objects that cannot be read as pods (fake API server over real HTTP, injected sleep)."""

from __future__ import annotations

import asyncio

import pytest
from kube_helpers import RecordingSleep, next_item, running

from watchdog.kube.pods import PodWatcher
from watchdog.testbed import SimClock


class OkRecordingSleep(RecordingSleep):
    """A RecordingSleep that also notes whether the watcher was ok when it started to back off."""

    def __init__(self) -> None:
        super().__init__()
        self.watcher: PodWatcher | None = None
        self.ok_when_sleeping: list[bool] = []

    async def __call__(self, seconds: float) -> None:
        self.ok_when_sleeping.append(bool(self.watcher and self.watcher.ok))
        await super().__call__(seconds)


def make_watcher(api, *, sleep, clock=None, **options):
    events: asyncio.Queue = asyncio.Queue()
    relists: asyncio.Queue = asyncio.Queue()
    watcher = PodWatcher(api, node="node-1", on_event=lambda kind, pod: events.put_nowait((kind, pod)),
                         on_relist=relists.put_nowait, sleep=sleep, clock=clock or SimClock(),
                         watch_timeout_seconds=30, **options)
    return watcher, events, relists


def watch_requests(server) -> list[dict]:
    return [query for method, path, query in server.requests if query.get("watch")]


async def test_watches_that_end_at_once_back_off_instead_of_looping(server, api):
    server.add_pod(namespace="ml", name="a")
    server.end_watches_at_once(5)  # a proxy answering 200 and closing before anything is sent
    sleep = RecordingSleep()
    watcher, events, relists = make_watcher(api, sleep=sleep)
    async with running(watcher.run()):
        await next_item(relists)
        await sleep.until(lambda: len(sleep.delays) >= 5)
        await server.watching()  # the sixth watch is a real one
        server.add_pod(namespace="ml", name="b")
        kind, pod = await next_item(events)
        assert (kind, pod.name) == ("ADDED", "b")
        assert watcher.ok is True
    assert sleep.delays == [0.5, 1.0, 2.0, 4.0, 8.0]  # one backoff step per empty stream, none after the real one
    assert len(watch_requests(server)) == 6
    assert watcher.counters["short_watches"] == 5
    assert watcher.counters["errors"] == 5
    assert watcher.counters["lists"] == 1  # the resourceVersion stays good: resume, do not relist
    assert "very short pod watch" in watcher.last_error


async def test_a_proxy_that_always_ends_watches_costs_one_request_per_backoff_step(server, api):
    server.end_watches_at_once(1000)
    sleep = RecordingSleep()
    watcher, events, relists = make_watcher(api, sleep=sleep, backoff_max=4.0)
    async with running(watcher.run()):
        await sleep.until(lambda: len(sleep.delays) >= 8)
        assert watcher.ok is False
    assert sleep.delays[:8] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 4.0]
    # One watch request per backoff step (the next may be in flight when the loop is cancelled), not a spin.
    assert len(watch_requests(server)) - len(sleep.delays) in (0, 1)


async def test_an_empty_watch_that_lasted_its_timeout_is_a_clean_end(server, api):
    server.end_watches_at_once(3)

    clock = SimClock()
    sleep = RecordingSleep()  # every reading of the clock is 10 s later: each watch "lasts" 20 s of its 30 s timeout
    watcher, events, relists = make_watcher(api, sleep=sleep, clock=lambda: clock.advance(10))
    async with running(watcher.run()):
        await next_item(relists)
        await server.watching()
        server.add_pod(namespace="ml", name="b")
        kind, pod = await next_item(events)
        assert (kind, pod.name) == ("ADDED", "b")
    assert sleep.delays == []  # a quiet watch that ran most of its term is reopened at once, as before
    assert watcher.counters["short_watches"] == 0 and watcher.counters["errors"] == 0
    assert len(watch_requests(server)) == 4


async def test_a_stalled_watch_is_not_ok_and_reconnects_from_its_version(server, api):
    server.add_pod(namespace="ml", name="a")
    sleep = OkRecordingSleep()
    watcher, events, relists = make_watcher(api, sleep=sleep, watch_idle_seconds=0.3)
    sleep.watcher = watcher
    async with running(watcher.run()):
        await next_item(relists)
        await server.watching()
        resumed_from = watcher.resource_version
        server.stall_watches()  # the open stream goes silent but stays open
        server.add_pod(namespace="ml", name="b")  # never sent on the stalled stream
        kind, pod = await next_item(events)
        assert (kind, pod.name) == ("ADDED", "b")  # from the reconnect's backlog
        assert watcher.ok is True
    assert watcher.counters["stalled_watches"] == 1
    assert watcher.counters["errors"] == 1
    assert sleep.delays == [0.5] and sleep.ok_when_sleeping == [False]
    assert "stalled" in watcher.last_error
    assert watcher.counters["lists"] == 1
    assert [q.get("resourceVersion") for q in watch_requests(server)][1] == resumed_from


def test_the_idle_limit_must_be_positive(api):
    with pytest.raises(ValueError, match="watch_idle_seconds"):
        PodWatcher(api, node="node-1", on_event=lambda *_: None, on_relist=lambda _: None, watch_idle_seconds=0)


def malformed_pod(name: str) -> dict:
    """A pod the API would never produce but a buggy webhook or a newer schema might: priority is not a number."""
    return {"metadata": {"name": name, "namespace": "ml"},
            "spec": {"nodeName": "node-1", "priority": "high", "containers": [{"name": "main"}]},
            "status": {"phase": "Running"}}


async def test_malformed_pods_are_counted_and_skipped_in_lists_and_watches(server, api):
    server.add_pod(namespace="ml", name="a")
    server.add_pod(malformed_pod("bad-listed"))
    sleep = RecordingSleep()
    watcher, events, relists = make_watcher(api, sleep=sleep)
    async with running(watcher.run()):
        listed = await next_item(relists)
        assert [p.name for p in listed] == ["a"]
        assert watcher.counters["malformed"] == 1
        await server.watching()
        bad = server.add_pod(malformed_pod("bad-watched"))
        server.add_pod(namespace="ml", name="b")
        kind, pod = await next_item(events)
        assert (kind, pod.name) == ("ADDED", "b")
        assert int(watcher.resource_version) > int(bad["metadata"]["resourceVersion"])
    assert watcher.counters["malformed"] == 2
    assert watcher.counters["errors"] == 0 and sleep.delays == []
    assert len(watch_requests(server)) == 1  # one stream throughout: no retry of the bad object's version
    assert watcher.ok is True
