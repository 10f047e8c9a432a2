"""The watch protocol of the fake API server: newline-delimited ``{"type","object"}`` events on one HTTP response.

A pod watch that silently loses events is the failure mode that matters for the watchdog (a stale cache means
evicting the wrong pod, or not protecting a new one), so this module reproduces the parts of the real watch that
clients must handle (docs "Efficient detection of changes", and staging/src/k8s.io/apiserver/pkg/storage/cacher):
- ``resourceVersion`` unset or "0": synthetic ADDED events for the current state, then changes; a specific version:
  only changes after it, or, when it is older than the kept window, one ERROR event with a 410 Status and the end
  of the stream (cacher.go Watch → "too old resource version").
- BOOKMARK events (only with ``allowWatchBookmarks=true``) carry just ``metadata.resourceVersion``, the store's
  current revision, so a client can resume from it without having seen any pod change.
- ``timeoutSeconds`` ends the stream cleanly; a dropped connection ends it abruptly.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable

from aiohttp import web

from watchdog.testbed.cluster.apiserver_store import ApiError, ResourceType, Store, StoredEvent, TooOld, status_body

class Bookmark:
    """Broadcast: send a bookmark at ``revision``, fixed when asked, so it never claims events still queued."""

    def __init__(self, revision: int):
        self.revision = revision


DROP = object()  # broadcast: close the connection without ending the chunked body
STALL = object()  # broadcast: send nothing more, keep the connection open (a half-open connection)
STOP = object()  # broadcast: end the stream cleanly (server shutdown)


def _line(kind: str, obj: dict[str, Any]) -> bytes:
    return (json.dumps({"type": kind, "object": obj}, separators=(",", ":")) + "\n").encode()


def _convert(event: StoredEvent, matches: Callable[[dict | None], bool]) -> tuple[str, dict] | None:
    """cache_watcher.go convertToWatchEvent: what a filtered watcher sees of one change."""
    now, before = matches(event.obj), matches(event.previous)
    if event.type == "ADDED":
        return ("ADDED", event.obj) if now else None
    if event.type == "DELETED":
        return ("DELETED", event.obj) if before else None
    if now and before:
        return ("MODIFIED", event.obj)
    if now:
        return ("ADDED", event.obj)
    if before:
        gone = dict(event.previous or {})
        gone["metadata"] = {**gone.get("metadata", {}), "resourceVersion": str(event.rv)}
        return ("DELETED", gone)
    return None


async def _hold(queue: asyncio.Queue, request: web.Request) -> None:
    """A stalled stream: swallow every change until the client goes away (aiohttp cancels the handler), the
    server stops (STOP), or ``drop_watches`` (DROP) closes the connection."""
    while True:
        item = await queue.get()
        if item is STOP:
            return
        if item is DROP:
            if request.transport is not None:
                request.transport.close()
            return


async def serve_watch(request: web.Request, *, store: Store, resource: ResourceType,
                      matches: Callable[[dict | None], bool], resource_version: str | None,
                      timeout_seconds: float | None, bookmarks: bool, bookmark_interval: float,
                      transform: Callable[[dict, bool], dict] | None = None,
                      send_initial_events: bool | None = None) -> web.StreamResponse:
    """``transform(obj, first)``: what to send for each ADDED/MODIFIED/DELETED object (a Table row for kubectl,
    with the column headers on the first event only, as handlers/watch.go's embedded encoder sends them).

    ``send_initial_events`` (KEP-3157 watch-list, which client-go 1.37's reflectors use by default): True sends the
    current state as ADDED events, then a BOOKMARK annotated ``k8s.io/initial-events-end: "true"`` at the
    revision of that state, then changes; False sends only changes after ``resource_version`` (or after now)."""
    sent = 0

    async def send(kind: str, obj: dict[str, Any]) -> None:
        nonlocal sent
        await response.write(_line(kind, transform(obj, sent == 0) if transform is not None else obj))
        sent += 1

    since = None if resource_version in (None, "", "0") or send_initial_events else int(resource_version)
    if send_initial_events is False and since is None:
        since = store.revision
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    try:
        backlog, queue = store.subscribe(resource, since)
    except TooOld as too_old:
        # The real server answers 200 and sends the error as the stream's only event.
        await response.prepare(request)
        await response.write(_line("ERROR", status_body(410, str(too_old), reason="Expired")))
        await response.write_eof()
        return response
    initial = [obj for obj in store.list(resource) if matches(obj)] if since is None else []
    initial_revision = store.revision
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_seconds if timeout_seconds else None
    try:
        await response.prepare(request)
        for obj in initial:
            await send("ADDED", obj)
        if send_initial_events:
            meta = {"resourceVersion": str(initial_revision), "annotations": {"k8s.io/initial-events-end": "true"}}
            await response.write(_line("BOOKMARK", {"kind": resource.kind, "apiVersion": resource.api_version,
                                                    "metadata": meta}))
        for event in backlog:
            if converted := _convert(event, matches):
                await send(*converted)
        while True:
            waits = [w for w in ((deadline - loop.time()) if deadline else None,
                                 bookmark_interval if bookmarks else None) if w is not None]
            try:
                item = await asyncio.wait_for(queue.get(), timeout=max(0.0, min(waits)) if waits else None)
            except TimeoutError:
                if deadline is not None and loop.time() >= deadline:
                    break
                item = Bookmark(store.revision)  # the queue is empty: every event so far was sent
            if item is STOP:
                break
            if item is DROP:
                if request.transport is not None:
                    request.transport.close()
                return response
            if item is STALL:
                await _hold(queue, request)
                return response
            if isinstance(item, Bookmark):
                if bookmarks:
                    meta = {"resourceVersion": str(item.revision)}
                    await response.write(_line("BOOKMARK", {"kind": resource.kind, "apiVersion": resource.api_version,
                                                            "metadata": meta}))
                continue
            if converted := _convert(item, matches):
                await send(*converted)
        await response.write_eof()
    except ConnectionError:
        pass  # the client went away
    finally:
        store.unsubscribe(resource, queue)
    return response


def watch_list_options(query: Any) -> bool | None:
    """sendInitialEvents, checked as apimachinery/pkg/apis/meta/internalversion/validation/validation.go
    validateWatchOptions checks it (422 on ListOptions); None when the request does not use watch-list."""
    initial, match = query.get("sendInitialEvents"), query.get("resourceVersionMatch")
    problems = []
    if initial is not None and match != "NotOlderThan":
        problems.append("resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch "
                        "to NotOlderThan")
    if match:
        if initial is None:
            problems.append("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless "
                            "sendInitialEvents is provided")
        if match != "NotOlderThan":
            problems.append(f'resourceVersionMatch: Unsupported value: "{match}": supported values: "NotOlderThan"')
        if query.get("allowWatchBookmarks", "").lower() != "true":
            problems.append("allowWatchBookmarks: Forbidden: allowWatchBookmarks must be set to true when "
                            "sendInitialEvents is provided")
    if problems:
        detail = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
        raise ApiError(422, f'ListOptions.meta.k8s.io "" is invalid: {detail}', reason="Invalid")
    return None if initial is None else initial.lower() == "true"
