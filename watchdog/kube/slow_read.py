"""One read of the API server repeated slowly, its last good answer kept: what the agent's node-scoped readers share.

Some facts about the node change only when an operator reconfigures something (GPU Feature Discovery's labels on the
Node, the KubeVirt VMIs placed on it), so one read at start and then every ``refresh_seconds`` is enough, and a
watch would be waste. A failed read keeps the last good answer (the node does not lose its configuration because
the API server is briefly unreachable), is counted by kind (``error_counts``, in the attribution stage's errors) and
logged once per outage; retries back off from ``backoff_initial_seconds``, doubling, up to
``backoff_max_seconds``. Nothing here blocks a tick: the tick reads ``value``. A subclass says what one read is
(``fetch``) and names its counters and log lines.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any, Awaitable, Callable

from watchdog.kube.client import KubeApi
from watchdog.kube.errors import KubeError

log = logging.getLogger(__name__)


class SlowRead:
    """``await reader.run()`` keeps ``value`` current; ``read()`` reads once. ``value`` is None until a read
    succeeded, then the last good answer; it is replaced only when an answer differs (readers compare with ``is``)."""

    counter_prefix = ""  # "node_labels" → error_counts() keys "node_labels_unavailable" …
    what = ""  # "labels", "VMIs": for the log lines

    def __init__(self, api: KubeApi, *, node: str, refresh_seconds: float,
                 backoff_initial_seconds: float = 1.0, backoff_max_seconds: float = 60.0,
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        if not node:
            raise ValueError(f"{type(self).__name__} needs the node's name")
        if refresh_seconds <= 0 or not 0 < backoff_initial_seconds <= backoff_max_seconds:
            raise ValueError("need refresh_seconds > 0 and 0 < backoff_initial_seconds <= backoff_max_seconds")
        self.api, self.node = api, node
        self.refresh_seconds = refresh_seconds
        self.backoff_initial, self.backoff_max = backoff_initial_seconds, backoff_max_seconds
        self.sleep = sleep
        self.value: Any = None
        self.reads = 0
        self.failures = 0  # consecutive failed reads (0 after a success)
        self.errors: dict[str, int] = {}  # kind → failed reads, cumulative

    async def fetch(self) -> Any:
        """One read: the answer, or KubeError / ValueError / AttributeError (a body of the wrong shape)."""
        raise NotImplementedError

    def error_counts(self) -> dict[str, int]:
        """Failed reads by kind (``<prefix>_unavailable``, ``<prefix>_forbidden`` …), for the stage's errors."""
        return {f"{self.counter_prefix}_{kind}": n for kind, n in self.errors.items()}

    async def read(self) -> bool:
        """One read; True when it succeeded. Never raises (cancellation aside)."""
        self.reads += 1
        try:
            value = await self.fetch()
        except (KubeError, ValueError, AttributeError) as error:
            kind = error_kind(error)
            self.errors[kind] = self.errors.get(kind, 0) + 1
            if not self.failures:
                log.warning("cannot read node %s's %s (%s), keeping the last ones: %s", self.node, self.what, kind,
                            error)
            self.failures += 1
            return False
        if self.failures:
            log.info("node %s's %s readable again after %d failed read(s)", self.node, self.what, self.failures)
        self.failures = 0
        if self.value is None or self.value != value:
            self.value = value
        return True

    async def run(self) -> None:
        """Long-running agent: read, then wait ``refresh_seconds`` (or the backoff after a failure), until cancelled."""
        while True:
            await self.read()
            if self.failures:
                await self.sleep(min(self.backoff_max, self.backoff_initial * 2 ** min(self.failures - 1, 32)))
            else:
                await self.sleep(self.refresh_seconds)


def error_kind(error: Exception) -> str:
    """KubeUnavailable → "unavailable", KubeNotFound → "not_found"; a body of the wrong shape → "malformed"."""
    if not isinstance(error, KubeError):
        return "malformed"
    name = type(error).__name__.removeprefix("Kube") or "error"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
