"""The agent's own Node's labels, re-read slowly: what GPU Feature Discovery says of the node's GPUs.

GFD labels the node ``nvidia.com/gpu.sharing-strategy`` and ``nvidia.com/gpu.replicas`` (k8s-device-plugin README,
"Shared Access to GPUs"); they change only when the device plugin is reconfigured, so one GET of
``/api/v1/nodes/<node>`` at start and then every ``refresh_seconds`` is enough, and a watch would be waste. A failed
read keeps the last good labels (a node does not lose its GPUs' configuration because the API server is briefly
unreachable), is counted (``error_counts``, in the attribution stage's errors) and logged once per outage; retries
back off from 1 s, doubling, up to ``backoff_max_seconds``. Nothing here blocks a tick: the tick reads ``labels``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from types import MappingProxyType
from typing import Awaitable, Callable, Mapping

from watchdog.kube.client import KubeApi
from watchdog.kube.errors import KubeError

log = logging.getLogger(__name__)


class NodeLabels:
    """``await NodeLabels(api, node=…).run()`` keeps ``labels`` current; ``read()`` reads once."""

    def __init__(self, api: KubeApi, *, node: str, refresh_seconds: float = 300.0,
                 backoff_initial_seconds: float = 1.0, backoff_max_seconds: float = 60.0,
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        if not node:
            raise ValueError("NodeLabels needs the node's name")
        if refresh_seconds <= 0 or not 0 < backoff_initial_seconds <= backoff_max_seconds:
            raise ValueError("need refresh_seconds > 0 and 0 < backoff_initial_seconds <= backoff_max_seconds")
        self.api = api
        self.node = node
        self.refresh_seconds = refresh_seconds
        self.backoff_initial = backoff_initial_seconds
        self.backoff_max = backoff_max_seconds
        self.sleep = sleep
        self.labels: Mapping[str, str] | None = None  # None until a read succeeded; then the last good labels
        self.reads = 0
        self.failures = 0  # consecutive failed reads (0 after a success)
        self.errors: dict[str, int] = {}  # kind → failed reads, cumulative

    def error_counts(self) -> dict[str, int]:
        """Failed reads by kind (``node_labels_unavailable``, ``node_labels_forbidden`` …), for the stage's errors."""
        return {f"node_labels_{kind}": n for kind, n in self.errors.items()}

    async def read(self) -> bool:
        """One GET of the Node; True when it succeeded. Never raises (cancellation aside)."""
        self.reads += 1
        path = f"/api/v1/nodes/{self.node}"
        try:
            node = await self.api.request_json("GET", path)
            labels = (node.get("metadata") or {}).get("labels") or {}
            if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
                raise ValueError("metadata.labels is not a map of strings")
        except (KubeError, ValueError, AttributeError) as error:
            kind = _kind(error)
            self.errors[kind] = self.errors.get(kind, 0) + 1
            if not self.failures:
                log.warning("cannot read node %s's labels (%s), keeping the last ones: %s", self.node, kind, error)
            self.failures += 1
            return False
        if self.failures:
            log.info("node %s's labels readable again after %d failed read(s)", self.node, self.failures)
        self.failures = 0
        if self.labels is None or dict(self.labels) != labels:  # a new object only on a change (readers compare `is`)
            self.labels = MappingProxyType(dict(labels))
        return True

    async def run(self) -> None:
        """Long-running agent: read, then wait ``refresh_seconds`` (or the backoff after a failure), until cancelled."""
        while True:
            await self.read()
            if self.failures:
                await self.sleep(min(self.backoff_max, self.backoff_initial * 2 ** min(self.failures - 1, 32)))
            else:
                await self.sleep(self.refresh_seconds)


def _kind(error: Exception) -> str:
    """KubeUnavailable → "unavailable", KubeNotFound → "not_found"; a body that is no Node → "malformed"."""
    if not isinstance(error, KubeError):
        return "malformed"
    name = type(error).__name__.removeprefix("Kube") or "error"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
