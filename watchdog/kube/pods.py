"""Pods as the watchdog sees them: ``pod_info`` turns an API pod into a PodInfo, ``PodWatcher`` keeps a node's pods
current through list + watch.

Attribution must not call the API on the sampling path, so the agent keeps a cache fed by one watch of its node's
pods (``fieldSelector=spec.nodeName=<node>``, the RBAC-friendly query; spec.nodeName is a selectable pod field,
kubernetes pkg/registry/core/pod/strategy.go). The watcher follows the
reflector contract of client-go (tools/cache/reflector.go ListAndWatch):
- list, then watch from the list's resourceVersion with ``allowWatchBookmarks=true``;
- remember the resourceVersion of every event, BOOKMARKs included, so a reconnect resumes where it stopped;
- a watch that ends (timeoutSeconds, a dropped connection) is simply reopened from that version, with no relist;
- only "410 Gone / too old resource version" (as an ERROR event or as the HTTP answer) forces a relist;
- anything else (unreachable, 5xx, garbage) is counted and retried after an exponential backoff;
- a watch that ends with nothing received long before its timeoutSeconds is a failure too (client-go's
  handleWatch returns "very short watch … watch lasted less than a second and no items received" and the reflector
  backs off): a proxy that answers 200 and closes at once must not turn the agent into a request loop;
- a watch on which nothing at all (event or BOOKMARK) arrives for ``watch_idle_seconds`` is treated as a stalled,
  half-open connection: not ok, counted, reopened after the backoff. The API server sends a bookmark about once a
  minute to watchers that asked (apiserver/pkg/storage/cacher: bookmarkFrequency), hence the 150 s default;
- an object that cannot be read as a pod is counted (``counters["malformed"]``) and skipped; its resourceVersion
  still counts, so one bad object cannot pin the watch to a version it would replay forever.

Why raw streaming (``list_pod_for_all_namespaces_without_preload_content(watch=True)``) and not
``kubernetes.aio.watch.Watch``: Watch builds its own ApiClient from the default Configuration on construction,
decodes every object into pydantic V1Pod models only for us to read a few fields, and hides the difference between
"stream ended" and "410" behind its own retry-once policy when timeout_seconds is unset. Reading the
newline-delimited JSON ourselves keeps the resourceVersion bookkeeping, the bookmark handling and the 410 decision
in this one module, where the tests can see them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import datetime
from types import MappingProxyType
from typing import Any, Awaitable, Callable

from kubernetes.aio import client as k8s

from watchdog.kube.client import KubeApi
from watchdog.kube.errors import KubeError, KubeUnavailable, error_for_status, kube_errors, status_body, translate
from watchdog.model import MIRROR_ANNOTATION, ContainerInfo, PodInfo, is_gpu_resource

log = logging.getLogger(__name__)

_RUNTIME_SCHEMES = ("containerd://", "cri-o://", "docker://")
MIB = 1024 * 1024


_serializer: k8s.ApiClient | None = None


def _as_dict(pod: Any) -> dict[str, Any]:
    global _serializer
    if isinstance(pod, dict):
        return pod
    if isinstance(pod, k8s.V1Pod):
        # The models' to_dict() uses snake_case names; the client's serializer gives the wire's camelCase.
        _serializer = _serializer or k8s.ApiClient(k8s.Configuration())
        return _serializer.sanitize_for_serialization(pod)
    raise TypeError(f"pod_info needs a pod dict or a V1Pod, got {type(pod).__name__}")


def _epoch(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str) and value:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return 0.0


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def strip_runtime_scheme(container_id: str | None) -> str | None:
    if not container_id:
        return None
    for scheme in _RUNTIME_SCHEMES:
        if container_id.startswith(scheme):
            return container_id[len(scheme):]
    return container_id


def _gpu_memory_bytes(containers: list[dict[str, Any]], resource: str | None) -> int | None:
    """Sum of ``resource`` over containers, read as MiB (extended resources are integers; requests == limits)."""
    if not resource:
        return None
    total, seen = 0, False
    for container in containers:
        resources = container.get("resources") or {}
        value = (resources.get("requests") or {}).get(resource, (resources.get("limits") or {}).get(resource))
        if value is None:
            continue
        try:
            total += int(str(value)) * MIB
            seen = True
        except ValueError:
            log.warning("ignoring non-integer %s request %r", resource, value)
    return total if seen else None


def _gpu_resources(containers: list[dict[str, Any]]) -> tuple[str, ...]:
    """The NVIDIA device-plugin resources the pod asks for (nvidia.com/gpu, nvidia.com/gpu.shared,
    nvidia.com/mig-<profile>), sorted."""
    names: set[str] = set()
    for container in containers:
        resources = container.get("resources") or {}
        for section in ("requests", "limits"):
            names.update(name for name in (resources.get(section) or {}) if is_gpu_resource(name))
    return tuple(sorted(names))


def pod_info(pod: Any, *, gpu_memory_resource: str | None = None) -> PodInfo:
    """A PodInfo from an API pod (a JSON dict as the API sends it, or a kubernetes V1Pod)."""
    data = _as_dict(pod)
    meta = data.get("metadata") or {}
    if not meta.get("name") or not meta.get("namespace"):
        raise ValueError(f"a pod needs metadata.name and metadata.namespace, got {meta!r:.200}")
    spec, status = data.get("spec") or {}, data.get("status") or {}
    # kubectl's last-applied-configuration repeats the whole manifest (often kilobytes); nothing here reads it.
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_APPLIED}
    owners = meta.get("ownerReferences") or []
    controller = next((o for o in owners if o.get("controller")), None)
    mirror = MIRROR_ANNOTATION in annotations
    owner_kind = "Node" if mirror else (controller or {}).get("kind")
    specs = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    ids = {s.get("name"): strip_runtime_scheme(s.get("containerID"))
           for s in list(status.get("containerStatuses") or []) + list(status.get("initContainerStatuses") or [])}
    return PodInfo(
        uid=meta.get("uid") or "",
        namespace=meta["namespace"],
        name=meta["name"],
        node=spec.get("nodeName") or "",
        labels=MappingProxyType(dict(meta.get("labels") or {})),
        annotations=MappingProxyType(annotations),
        priority=int(spec.get("priority") or 0),
        priority_class=spec.get("priorityClassName") or "",
        qos_class=status.get("qosClass") or "",
        owner_kind=owner_kind,
        mirror=mirror,
        phase=status.get("phase") or "Pending",
        deleting=bool(meta.get("deletionTimestamp")),
        created=_epoch(meta.get("creationTimestamp")),
        containers=tuple(ContainerInfo(c["name"], ids.get(c["name"])) for c in specs if c.get("name")),
        gpu_memory_request_bytes=_gpu_memory_bytes(specs, gpu_memory_resource),
        gpu_resources=_gpu_resources(specs),
    )


class _Relist(Exception):
    """The watch said its resourceVersion is too old (410): list again."""


class PodWatcher:
    """The agent's pod cache feeder: ``await PodWatcher(api, node=…, on_event=…, on_relist=…).run()``.

    ``on_relist`` gets the full set after every list (replace the cache); ``on_event`` gets ("ADDED" | "MODIFIED" |
    "DELETED", PodInfo) for each change after it. Both are plain callables called on the event loop.
    """

    def __init__(self, api: KubeApi, *, node: str, on_event: Callable[[str, PodInfo], None],
                 on_relist: Callable[[list[PodInfo]], None], clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, watch_timeout_seconds: int = 290,
                 watch_idle_seconds: float = 150.0, backoff_initial: float = 0.5, backoff_max: float = 30.0,
                 gpu_memory_resource: str | None = None):
        if not node:
            raise ValueError("PodWatcher needs the node name (spec.nodeName) to select its pods")
        if not watch_idle_seconds > 0:
            raise ValueError(f"watch_idle_seconds must be positive, got {watch_idle_seconds!r}")
        self.api = api
        self.node = node
        self.on_event = on_event
        self.on_relist = on_relist
        self.clock = clock
        self.sleep = sleep
        self.watch_timeout_seconds = watch_timeout_seconds
        self.watch_idle_seconds = watch_idle_seconds
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.gpu_memory_resource = gpu_memory_resource
        self.resource_version: str | None = None
        self.counters = {"lists": 0, "relists": 0, "watches": 0, "errors": 0, "events": 0, "bookmarks": 0,
                         "callback_errors": 0, "malformed": 0, "short_watches": 0, "stalled_watches": 0}
        self.last_error: str = ""
        self.last_success: float | None = None  # clock() of the last successful list or watch start
        self._ok = False

    @property
    def ok(self) -> bool:
        """False until the first list, and whenever the latest try to reach the API failed."""
        return self._ok

    @property
    def _selector(self) -> str:
        return f"spec.nodeName={self.node}"

    async def run(self) -> None:
        """List and watch until cancelled; never raises anything but CancelledError."""
        failures = 0
        while True:
            try:
                if self.resource_version is None:
                    await self._list()
                await self._watch()
                failures = 0
            except _Relist:
                self.resource_version = None
                self.counters["relists"] += 1
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - every failure degrades to "retry later", counted
                self._failed(error)
                delay = min(self.backoff_max, self.backoff_initial * 2 ** failures)
                failures += 1
                await self.sleep(delay)

    def _failed(self, error: Exception) -> None:
        try:
            described = translate(error)
        except TypeError:
            described = KubeError(f"{type(error).__name__}: {error}")
        self.counters["errors"] += 1
        self.last_error = str(described)
        self._ok = False
        log.warning("%s watch on %s: %s", self._what, self.node, described)

    _what = "pod"  # what the logs call the watched kind (a subclass watches another kind the same way)

    async def _request(self, **query: Any) -> Any:
        """One list or watch request, unread (``*_without_preload_content``); a subclass names another kind."""
        timeout = query.pop("_request_timeout", None)
        return await self.api.send("GET", "/api/v1/pods", query=query, timeout=timeout)

    def _describe(self, info: Any) -> str:
        return info.ref.key

    async def _list(self) -> None:
        with kube_errors():
            response = await self._request(field_selector=self._selector, _request_timeout=self.api.timeout)
            raw = await response.read()
        body = status_body(raw)
        if response.status != 200:
            raise error_for_status(response.status, body)
        items = body.get("items") or []
        pods = [info for info in (self._pod_or_none(item, "listed") for item in items) if info is not None]
        self.counters["lists"] += 1
        self.resource_version = (body.get("metadata") or {}).get("resourceVersion") or None
        self._succeeded()
        try:
            self.on_relist(pods)
        except Exception:  # same rule as on_event: count, log, keep watching
            self.counters["callback_errors"] += 1
            log.exception("pod watch consumer failed on a relist of %d pods", len(pods))

    def _succeeded(self) -> None:
        self._ok = True
        self.last_success = self.clock()

    def _pod_or_none(self, obj: Any, how: str) -> PodInfo | None:
        """pod_info, or None (counted, logged) for an object that cannot be read as a pod."""
        try:
            return pod_info(obj, gpu_memory_resource=self.gpu_memory_resource)
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            self.counters["malformed"] += 1
            log.warning("pod watch on %s: skipping a malformed %s object: %s", self.node, how, error)
            return None

    async def _watch(self) -> None:
        """One watch request, read to its end. Returns on a clean end or a dropped connection after data; raises
        (so run() backs off) when the stream stalls, or ends long before its timeout with nothing received."""
        started = self.clock()
        with kube_errors():
            response = await self._request(
                watch=True, field_selector=self._selector, resource_version=self.resource_version,
                allow_watch_bookmarks=True, timeout_seconds=self.watch_timeout_seconds,
                _request_timeout=float(self.watch_timeout_seconds) + self.api.timeout)
        try:
            if response.status == 410:
                raise _Relist()
            if response.status != 200:
                raise error_for_status(response.status, status_body(await response.read()))
            self.counters["watches"] += 1
            self._succeeded()
            received = 0
            while True:
                idle = asyncio.timeout(self.watch_idle_seconds)
                try:
                    async with idle:
                        line = await response.content.readline()
                except Exception:  # noqa: BLE001 - aiohttp payload errors, resets, read timeouts
                    if idle.expired():
                        self.counters["stalled_watches"] += 1
                        raise KubeUnavailable(f"pod watch stalled: nothing (not even a bookmark) received for "
                                              f"{self.watch_idle_seconds:g} s") from None
                    if received:
                        return  # dropped after data: resume from the last version at once
                    raise  # dropped before anything arrived: count it and back off
                if not line:
                    self._check_not_too_short(received, started)
                    return  # timeoutSeconds reached, or the server closed the stream cleanly
                if line.strip():
                    received += 1
                    self._handle(line)
        finally:
            response.release()

    def _check_not_too_short(self, received: int, started: float) -> None:
        """client-go tools/cache/reflector.go handleWatch: a watch that closes with no items long before its
        timeout is an error ("very short watch"), so the caller backs off instead of reopening at once. client-go
        draws the line at one second; half the requested timeoutSeconds also covers proxies that cut idle streams
        after a few seconds, and a healthy watch gets a bookmark long before it (the server sends one about once a
        minute)."""
        lasted = self.clock() - started
        if received or lasted >= self.watch_timeout_seconds / 2:
            return
        self.counters["short_watches"] += 1
        raise KubeUnavailable(f"very short pod watch: it ended after {lasted:.1f} s with nothing received "
                              f"(timeoutSeconds={self.watch_timeout_seconds})")

    def _handle(self, line: bytes) -> None:
        try:
            event = json.loads(line)
            kind, obj = event["type"], event["object"]
        except (ValueError, KeyError, TypeError) as error:
            raise KubeError(f"malformed watch event: {line[:200]!r}") from error
        if kind == "ERROR":
            code = obj.get("code") if isinstance(obj, dict) else None
            if code == 410:
                raise _Relist()
            raise error_for_status(int(code or 500), obj if isinstance(obj, dict) else {})
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        version = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if version:
            self.resource_version = str(version)
        if kind == "BOOKMARK":
            self.counters["bookmarks"] += 1
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            raise KubeError(f"unknown watch event type {kind!r}")
        self.counters["events"] += 1
        info = self._pod_or_none(obj, kind)
        if info is None:
            return  # counted; the resourceVersion above already moved past it
        try:
            self.on_event(kind, info)
        except Exception:  # a consumer's bug must not stop the cache feed or lose our place in the stream
            self.counters["callback_errors"] += 1
            log.exception("%s watch consumer failed on %s %s", self._what, kind, self._describe(info))
