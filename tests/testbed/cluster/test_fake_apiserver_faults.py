"""The fake API server's watch fault switches: streams that end at once, and streams that stall half-open."""

from __future__ import annotations

import json

import aiohttp


async def test_end_watches_at_once_answers_200_with_an_empty_stream_then_serves_normally(server):
    server.add_pod(namespace="ml", name="a")
    server.end_watches_at_once(1)
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{server.url}/api/v1/pods") as resp:
            assert resp.status == 200 and len((await resp.json())["items"]) == 1  # lists are never cut
        params = {"watch": "true"}
        async with session.get(f"{server.url}/api/v1/pods", params=params) as resp:
            assert resp.status == 200
            assert await resp.read() == b""
        async with session.get(f"{server.url}/api/v1/pods", params=params) as resp:
            first = json.loads(await resp.content.readline())
            assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "a")


async def test_a_stalled_watch_sends_nothing_more_until_its_connection_closes(server):
    server.add_pod(namespace="ml", name="a")
    async with aiohttp.ClientSession() as session:
        params = {"watch": "true", "allowWatchBookmarks": "true"}
        async with session.get(f"{server.url}/api/v1/pods", params=params) as resp:
            assert json.loads(await resp.content.readline())["type"] == "ADDED"
            await server.watching()
            server.stall_watches()
            server.add_pod(namespace="ml", name="b")
            server.send_bookmark()
            server.drop_watches()  # the only way out of the stall, short of the client giving up
            received = []
            try:
                while line := await resp.content.readline():
                    received.append(line)
            except aiohttp.ClientPayloadError:
                pass  # the connection was closed mid-stream
            assert received == []
