"""A ceiling every sender shares: the agents on all GPU nodes and the controller together never send more than
`max_evictions` evictions per `window_seconds`.

Each agent's token bucket is per node, so a cluster-wide failure (a bad policy push, an NVML bug on one driver
version, an alert storm) could still evict a few pods on *every* node at once. The descheduler bounds the same risk
with a total limit (kubernetes-sigs/descheduler pkg/descheduler/evictions/evictions.go, maxPodsToEvictTotal); its
evictor is one process, ours are hundreds, so the count lives in the Kubernetes API itself: one ConfigMap holding
the recent sends of the window, updated like any shared object, with optimistic concurrency (Kubernetes docs,
"API Concepts", resource versions: an update carrying a stale metadata.resourceVersion gets 409 Conflict).

`take()` is read → check → write: GET the ConfigMap, drop entries older than the window, refuse when `max_evictions`
remain, else PUT the list with one more entry *and the resourceVersion it read*. A 409 means another sender wrote
in between: read again and decide again, a bounded number of times. The slot is taken *before* the eviction is
sent and never given back, so a send that fails or is refused still counts: the ceiling errs toward fewer
evictions, never more.

It fails closed. A ConfigMap that cannot be read (403, 5xx, unreachable), that does not exist (it is part of the
install, deploy/daemonset.yaml; a missing one is a broken install, not "no limit"), whose content is not a list
this module wrote, or that keeps changing under us, means no slot: nothing is sent. `take()` never raises.

Timestamps are each writer's wall clock; nodes' clocks are assumed NTP-synchronised to well within a window. A
clock running ahead holds its slot longer (fewer evictions); one running behind by `s` seconds shortens the window
of its own entries by `s`.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable

from watchdog.config.action import ClusterBudget
from watchdog.config.runtime import RuntimePolicy
from watchdog.kube.client import KubeApi
from watchdog.kube.errors import KubeConflict, KubeError, KubeNotFound

log = logging.getLogger(__name__)

DATA_KEY = "sends.json"
UNKNOWN = "cluster eviction budget unknown"
SPENT = "cluster eviction budget spent"


class ClusterEvictionBudget:
    """`await budget.take("ns/pod")` → None when a slot was taken (send now), else why nothing may be sent."""

    def __init__(self, api: KubeApi | None, *, settings: ClusterBudget, namespace: str, identity: str,
                 wall_clock: Callable[[], float] = time.time, max_attempts: int = 5) -> None:
        """`namespace`: the agents' namespace, used when the settings name none. `identity`: who takes (the node, or
        the controller replica), written next to each slot for whoever reads the ConfigMap."""
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self._api = api
        self._settings = settings
        self._default_namespace = namespace
        self._identity = identity
        self._wall_clock = wall_clock
        self._max_attempts = max_attempts
        self.taken = 0
        self.refused = 0  # the window was full
        self.conflicts = 0  # 409s retried
        self.failures = 0  # unreadable, unwritable, malformed or too contended: nothing sent

    @property
    def active(self) -> bool:
        return self._api is not None and self._settings.enabled

    @property
    def namespace(self) -> str:
        return self._settings.namespace or self._default_namespace

    @property
    def _path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/configmaps/{self._settings.name}"

    @property
    def _where(self) -> str:
        return f"ConfigMap {self.namespace}/{self._settings.name}"

    def apply_runtime(self, runtime: RuntimePolicy) -> None:
        """A policy load: its budget, in the agent's own namespace unless it names another."""
        self.set_settings(runtime.action.cluster_budget, namespace=runtime.own_namespace or self._default_namespace)

    def set_settings(self, settings: ClusterBudget, *, namespace: str) -> None:
        self._settings = settings
        self._default_namespace = namespace

    async def take(self, pod_key: str) -> str | None:
        """Take one slot for a send about `pod_key`; None when taken, else the reason nothing may be sent."""
        if not self.active:
            return None
        assert self._api is not None
        settings = self._settings
        for _ in range(self._max_attempts):
            try:
                current = await self._api.request_json("GET", self._path)
            except KubeNotFound:
                return self._fail(f"{UNKNOWN}: {self._where} does not exist (it ships with deploy/daemonset.yaml)")
            except KubeError as error:
                return self._fail(f"{UNKNOWN}: cannot read {self._where}: {error}")
            now = self._wall_clock()
            entries = _entries(current)
            if not (current.get("metadata") or {}).get("resourceVersion"):
                # Without it the PUT would overwrite whatever is there: no compare-and-swap, no ceiling.
                return self._fail(f"{UNKNOWN}: {self._where} came back without a resourceVersion")
            if entries is None:
                return self._fail(f"{UNKNOWN}: {self._where} key {DATA_KEY} is not a list of sends")
            live = [entry for entry in entries if entry["at"] > now - settings.window_seconds]
            if len(live) >= settings.max_evictions:
                self.refused += 1
                free_in = min(entry["at"] for entry in live) + settings.window_seconds - now
                return (f"{SPENT}: {len(live)} of {settings.max_evictions} sends in the last "
                        f"{settings.window_seconds:g}s ({self._where}); next slot in {max(0.0, free_in):.0f}s")
            live.append({"at": round(now, 3), "by": self._identity, "pod": pod_key})
            try:
                await self._api.request_json("PUT", self._path, body=_written(current, live))
            except KubeConflict:
                self.conflicts += 1  # another sender wrote since our read: read again, decide again
                continue
            except KubeError as error:
                return self._fail(f"{UNKNOWN}: cannot write {self._where}: {error}")
            self.taken += 1
            return None
        return self._fail(f"{UNKNOWN}: {self._where} changed under {self._max_attempts} writes in a row")

    def _fail(self, reason: str) -> str:
        self.failures += 1
        log.warning("%s: nothing sent", reason)
        return reason


def _entries(config_map: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The sends recorded in the ConfigMap (none when the key is absent); None when the key holds anything else."""
    raw = (config_map.get("data") or {}).get(DATA_KEY)
    if raw is None:
        return []
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(parsed, list):
        return None
    entries = []
    for item in parsed:
        at = item.get("at") if isinstance(item, dict) else None
        if isinstance(at, bool) or not isinstance(at, (int, float)):
            return None
        entries.append(item)
    return entries


def _written(current: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The ConfigMap to PUT: the one read, with our list and the resourceVersion it had (the compare-and-swap)."""
    metadata = current.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {key: metadata[key] for key in ("name", "namespace", "resourceVersion", "labels", "annotations")
                     if key in metadata},
        "data": {**(current.get("data") or {}), DATA_KEY: json.dumps(entries, separators=(",", ":"))},
    }
