"""Handled alert firings, kept where every controller replica sees them: a ConfigMap the leader writes before it
sends an eviction.

Alertmanager repeats a firing (same fingerprint and startsAt) every repeat_interval and retries it after a 5xx
(Alertmanager docs, configuration: repeat_interval, <webhook_config>). The Lease makes sure one replica acts at a
time, but an in-memory "already handled" set dies with the replica that holds it: after a failover the new leader
would take the repeat for a new firing and, for a namespace-only alert, evict a second pod of the tenant. So the
leader records the firing here *before* the eviction goes out (an entry "sending …" left by a crash counts as handled:
when in doubt, never evict twice) and a new leader reads the record before acting. Entries whose attempt may be
retried (rate limited, paused, PDB) are removed again so Alertmanager's next delivery can try.

One data key holds a JSON object in insertion order, trimmed to `capacity` (a ConfigMap is limited to 1 MiB:
etcd's request size limit, k8s.io/api core/v1 types.go ConfigMap). Writes are PUTs carrying the resourceVersion
that was read, so a stale writer gets 409 Conflict instead of overwriting (optimistic concurrency).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

from watchdog.kube.client import KubeApi
from watchdog.kube.errors import KubeConflict, KubeError, KubeNotFound

log = logging.getLogger(__name__)

DATA_KEY = "handled.json"


class LedgerError(RuntimeError):
    """The ledger could not be read or written; the caller must not evict (and answers 503)."""


class HandledFirings(Protocol):
    """Where the controller records which firings it handled; keys are "<fingerprint>@<startsAt>"."""

    async def lookup(self, key: str) -> str | None: ...

    async def record(self, key: str, entry: str) -> None: ...

    async def forget(self, key: str) -> None: ...


def firing_key(fingerprint: str, starts_at: str) -> str:
    """The ledger key of one firing of one alert."""
    return f"{fingerprint}@{starts_at}"


class MemoryLedger:
    """A ledger in this process only: for a single replica and for tests."""

    def __init__(self, capacity: int = 1000) -> None:
        self._capacity = capacity
        self.entries: dict[str, str] = {}

    async def lookup(self, key: str) -> str | None:
        return self.entries.get(key)

    async def record(self, key: str, entry: str) -> None:
        self.entries.pop(key, None)
        self.entries[key] = entry
        _trim(self.entries, self._capacity)

    async def forget(self, key: str) -> None:
        self.entries.pop(key, None)


class ConfigMapLedger:
    """The ledger in ConfigMap `namespace/name`, read and written through the API server."""

    def __init__(self, api: KubeApi, *, namespace: str, name: str, capacity: int = 500) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self._api = api
        self._namespace = namespace
        self._name = name
        self._capacity = capacity

    @property
    def _collection(self) -> str:
        return f"/api/v1/namespaces/{self._namespace}/configmaps"

    async def lookup(self, key: str) -> str | None:
        """The recorded entry for `key`, None when there is none; LedgerError when the API cannot be read."""
        _, entries = await self._read()
        return entries.get(key)

    async def record(self, key: str, entry: str) -> None:
        await self._change(lambda entries: _put(entries, key, entry, self._capacity))

    async def forget(self, key: str) -> None:
        await self._change(lambda entries: entries.pop(key, None) is not None)

    async def _read(self) -> tuple[dict[str, Any] | None, dict[str, str]]:
        try:
            config_map = await self._api.request_json("GET", f"{self._collection}/{self._name}")
        except KubeNotFound:
            return None, {}
        except KubeError as error:
            raise LedgerError(f"cannot read ConfigMap {self._namespace}/{self._name}: {error}") from error
        raw = (config_map.get("data") or {}).get(DATA_KEY) or "{}"
        try:
            entries = json.loads(raw)
        except json.JSONDecodeError:
            log.warning("ConfigMap %s/%s holds no valid JSON; starting it afresh", self._namespace, self._name)
            entries = {}
        if not isinstance(entries, dict):
            entries = {}
        return config_map, {str(k): str(v) for k, v in entries.items()}

    async def _change(self, edit) -> None:
        # One retry after a 409: only the leader writes, so a conflict means our read raced our own earlier write.
        for attempt in (1, 2):
            config_map, entries = await self._read()
            if not edit(entries):
                return  # nothing to change (forgetting a key that is not there)
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": self._name, "namespace": self._namespace},
                "data": {DATA_KEY: json.dumps(entries, separators=(",", ":"))},
            }
            try:
                if config_map is None:
                    await self._api.request_json("POST", self._collection, body=body)
                else:
                    body["metadata"]["resourceVersion"] = config_map["metadata"]["resourceVersion"]
                    await self._api.request_json("PUT", f"{self._collection}/{self._name}", body=body)
                return
            except KubeConflict as error:
                if attempt == 2:
                    raise LedgerError(f"ConfigMap {self._namespace}/{self._name} kept changing: {error}") from error
            except KubeError as error:
                raise LedgerError(f"cannot write ConfigMap {self._namespace}/{self._name}: {error}") from error


def _put(entries: dict[str, str], key: str, entry: str, capacity: int) -> bool:
    entries.pop(key, None)
    entries[key] = entry
    _trim(entries, capacity)
    return True


def _trim(entries: dict[str, str], capacity: int) -> None:
    while len(entries) > capacity:
        del entries[next(iter(entries))]
