"""PodWatcher against the fake API server over real HTTP: list, watch, reconnect, relist, bookmarks, backoff."""

from __future__ import annotations

import asyncio

from kube_helpers import RecordingSleep, next_item, running

from watchdog.kube.client import KubeApi
from watchdog.kube.pods import PodWatcher


def make_watcher(api, sleep=None, node="node-1"):
    events: asyncio.Queue = asyncio.Queue()
    relists: asyncio.Queue = asyncio.Queue()
    watcher = PodWatcher(api, node=node, on_event=lambda kind, pod: events.put_nowait((kind, pod)),
                         on_relist=relists.put_nowait, sleep=sleep or RecordingSleep(), watch_timeout_seconds=30)
    return watcher, events, relists


async def expect_event(events, kind, name):
    got_kind, pod = await next_item(events)
    assert (got_kind, pod.name) == (kind, name)
    return pod


async def test_lists_only_its_node_then_streams_changes(server, api):
    server.add_pod(namespace="ml", name="a", node="node-1")
    server.add_pod(namespace="ml", name="elsewhere", node="node-2")
    watcher, events, relists = make_watcher(api)
    assert watcher.ok is False
    async with running(watcher.run()):
        listed = await next_item(relists)
        assert [p.name for p in listed] == ["a"]
        assert watcher.ok is True
        server.add_pod(namespace="ml", name="b", node="node-1")
        server.add_pod(namespace="ml", name="c", node="node-2")  # not ours: never delivered
        server.add_pod(namespace="ml", name="d", node="node-1")
        await expect_event(events, "ADDED", "b")
        await expect_event(events, "ADDED", "d")
    assert watcher.counters["lists"] == 1
    assert ("GET", "/api/v1/pods", {"fieldSelector": "spec.nodeName=node-1"}) in server.requests


async def test_dropped_watch_resumes_from_last_version_without_relisting(server, api):
    server.add_pod(namespace="ml", name="a")
    watcher, events, relists = make_watcher(api)
    async with running(watcher.run()):
        await next_item(relists)
        server.add_pod(namespace="ml", name="b")
        await expect_event(events, "ADDED", "b")
        version_after_b = watcher.resource_version
        await server.watching()
        server.drop_watches()
        server.add_pod(namespace="ml", name="c")  # happens while the watch is down
        await expect_event(events, "ADDED", "c")
    assert watcher.counters["lists"] == 1
    assert watcher.counters["relists"] == 0
    assert watcher.counters["watches"] >= 2
    watch_versions = [q.get("resourceVersion") for m, p, q in server.requests if q.get("watch")]
    assert version_after_b in watch_versions[1:]


async def test_too_old_resource_version_forces_one_relist(server, api):
    server.add_pod(namespace="ml", name="a")
    watcher, events, relists = make_watcher(api)
    async with running(watcher.run()):
        await next_item(relists)
        server.add_pod(namespace="ml", name="b")
        await expect_event(events, "ADDED", "b")
        server.drop_watches()
        server.add_pod(namespace="ml", name="c")
        server.expire_history()  # the reconnect's version (b's) is now older than the window: 410
        relisted = await next_item(relists)
        assert sorted(p.name for p in relisted) == ["a", "b", "c"]
        server.add_pod(namespace="ml", name="d")
        await expect_event(events, "ADDED", "d")
    assert watcher.counters["relists"] == 1
    assert watcher.counters["lists"] == 2
    assert watcher.counters["errors"] == 0


async def test_bookmark_advances_the_resume_version(server, api):
    server.add_pod(namespace="ml", name="a")
    watcher, events, relists = make_watcher(api)
    async with running(watcher.run()):
        await next_item(relists)
        await server.watching()
        listed_version = watcher.resource_version
        unrelated = server.set_config_map("kube-system", "unrelated", {"k": "v"})  # moves the global revision
        bookmark_version = unrelated["metadata"]["resourceVersion"]
        assert bookmark_version != listed_version
        server.send_bookmark()
        server.drop_watches()
        server.add_pod(namespace="ml", name="b")
        await expect_event(events, "ADDED", "b")
    assert watcher.counters["bookmarks"] == 1
    watch_versions = [q.get("resourceVersion") for m, p, q in server.requests if q.get("watch")]
    assert watch_versions[0] == listed_version
    assert bookmark_version in watch_versions[1:]  # resumed from the bookmark, not from the list
    assert all(q.get("allowWatchBookmarks") == "true" for m, p, q in server.requests if q.get("watch"))


async def test_deletion_reaches_on_event_as_terminating_then_deleted(server, api):
    server.add_pod(namespace="ml", name="a")
    watcher, events, relists = make_watcher(api)
    async with running(watcher.run()):
        await next_item(relists)
        await api.core.delete_namespaced_pod("a", "ml")
        terminating = await expect_event(events, "MODIFIED", "a")
        assert terminating.deleting is True and terminating.live is False
        assert server.finish_deletions() == 1
        gone = await expect_event(events, "DELETED", "a")
        assert gone.uid == terminating.uid


async def test_errors_back_off_exponentially_then_recover(server, api):
    server.fail_next(3, status=500, path_prefix="/api/v1/pods")
    sleep = RecordingSleep()
    watcher, events, relists = make_watcher(api, sleep=sleep)
    async with running(watcher.run()):
        listed = await next_item(relists)
        assert listed == []
        assert watcher.ok is True
    assert sleep.delays == [0.5, 1.0, 2.0]
    assert watcher.counters["errors"] == 3
    assert "500" in watcher.last_error


async def test_unreachable_api_is_not_ok_and_backoff_is_capped():
    sleep = RecordingSleep()
    async with KubeApi.from_url("http://127.0.0.1:9", timeout=1) as unreachable:
        watcher = PodWatcher(unreachable, node="node-1", on_event=lambda *_: None, on_relist=lambda _: None,
                             sleep=sleep, backoff_max=4.0)
        async with running(watcher.run()):
            await sleep.until(lambda: len(sleep.delays) >= 6)
    assert watcher.ok is False
    assert sleep.delays[:6] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert watcher.counters["errors"] >= 6
    assert watcher.counters["lists"] == 0


async def test_a_failing_consumer_does_not_stop_the_feed(server, api):
    seen: asyncio.Queue = asyncio.Queue()

    def consumer(kind, pod):
        seen.put_nowait(pod.name)
        if pod.name == "bad":
            raise RuntimeError("consumer bug")

    relists: asyncio.Queue = asyncio.Queue()
    watcher = PodWatcher(api, node="node-1", on_event=consumer, on_relist=relists.put_nowait)
    async with running(watcher.run()):
        await next_item(relists)
        server.add_pod(namespace="ml", name="bad")
        server.add_pod(namespace="ml", name="good")
        assert await next_item(seen) == "bad"
        assert await next_item(seen) == "good"
    assert watcher.counters["callback_errors"] == 1
    assert watcher.counters["lists"] == 1
