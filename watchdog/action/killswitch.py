"""The cluster-wide pause button: a ConfigMap key that, while "true", turns every eviction into PAUSED.

It fails closed. Until the ConfigMap has been read once, and whenever the last good read is older than
`stale_after_refreshes` refresh periods, the state is *unknown* and nothing is sent ("kill switch unknown"): an
agent whose RBAC or API path is broken cannot see an operator's pause, so it must not act as if there were none.
A ConfigMap that does not exist (404) is a good read meaning "not paused": the switch is optional.

Two readers keep it current: `watcher()` re-reads it every `refresh_seconds` so `paused()` and the exported state
stay fresh, and the evictor calls `confirm()` just before it sends a request, so a pause takes effect on the very
next send rather than up to a refresh period later (sends are rate-limited, so this costs one GET per attempt).
After a failed read, `confirm()` answers "unknown" without another GET until `refresh_seconds` have passed since
that failure: PAUSED takes no token, so without this an unreadable switch (a missing RBAC rule, an API server in
trouble) would cost one GET per cycle per node, on the API server least able to take it.
`reads`, `failures` and `last_success` are kept for the exporter.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Protocol

from watchdog.config.action import KillSwitch as KillSwitchSettings
from watchdog.config.runtime import RuntimePolicy
from watchdog.model.text import bounded

log = logging.getLogger(__name__)

UNKNOWN = "kill switch unknown"


class KillSwitchReader(Protocol):
    """watchdog.kube.KubeEvictions.read_kill_switch: True/False, or None when the ConfigMap could not be read."""

    async def read_kill_switch(self, namespace: str, configmap_name: str, key: str = "paused") -> bool | None: ...


class KillSwitch:
    """Caches the kill switch's state; the Evictor asks `switched_on` each decision and `confirm()` before a send."""

    def __init__(
        self,
        reader: KillSwitchReader | None,
        *,
        settings: KillSwitchSettings,
        namespace: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reader = reader
        self._settings = settings
        self._namespace = settings.namespace or namespace
        # Monotonic by default: staleness is measured against the watcher's own asyncio.sleep, not a wall clock
        # that may step (or a simulated one that jumps ahead of the watcher).
        self._clock = clock
        self._paused = False
        self.reads = 0
        self.failures = 0
        self.last_success: float | None = None  # clock() of the last good read; None until there is one
        self._failed_at: float | None = None  # clock() of the latest read, when it failed; None after a good one
        self._failing = False  # log a failing switch once per outage, not every refresh

    @property
    def active(self) -> bool:
        """Whether there is a switch to read at all (disabled, or no Kubernetes API: never paused)."""
        return self._reader is not None and self._settings.enabled

    @property
    def switched_on(self) -> bool:
        """The last good read said "paused" (whether or not that read is still fresh)."""
        return self.active and self._paused

    def apply_runtime(self, runtime: RuntimePolicy) -> None:
        """A policy load: the switch it names, in the agent's own namespace unless it names another."""
        self.set_settings(runtime.kill_switch, namespace=runtime.own_namespace or self._namespace)

    def set_settings(self, settings: KillSwitchSettings, *, namespace: str) -> None:
        changed = (settings.namespace or namespace, settings.name, settings.key) != (
            self._namespace, self._settings.name, self._settings.key)
        self._settings = settings
        self._namespace = settings.namespace or namespace
        if changed:
            self.last_success = None  # another ConfigMap: what we knew of the old one says nothing about it
            self._failed_at = None  # and its failures say nothing either: read the new one at the next chance

    def blocking_reason(self) -> str | None:
        """Why nothing may be sent now (paused, never read, or stale), or None when sends may go."""
        if not self.active:
            return None
        if self.last_success is None:
            return f"{UNKNOWN}: {self._where} never read successfully ({self.failures} failed read(s))"
        age = self._clock() - self.last_success
        limit = self._settings.stale_after_refreshes * self._settings.refresh_seconds
        if age > limit:
            return f"{UNKNOWN}: last good read of {self._where} was {age:.0f}s ago (stale after {limit:g}s)"
        if self._paused:
            return "kill switch is on"
        return None

    def paused(self) -> bool:
        """The operator's pause as last read (for the paused gauge). Sends also stop while `unknown`; the Evictor
        asks `blocking_reason()`/`confirm()`, which cover both."""
        return self.switched_on

    @property
    def unknown(self) -> bool:
        """Never read successfully, or the last good read is stale: sends hold until a read succeeds."""
        reason = self.blocking_reason()
        return reason is not None and reason.startswith(UNKNOWN)

    async def refresh(self) -> bool:
        """Read the ConfigMap once; returns `paused()` afterwards (a failed read keeps the last good answer)."""
        await self._read()
        return self.paused()

    async def confirm(self) -> str | None:
        """Re-read the switch right before a send: None when the send may go, else why not (a failed read stops it)."""
        if not self.active:
            return None
        if self._failed_at is not None:
            since = self._clock() - self._failed_at
            if since < self._settings.refresh_seconds:
                wait = self._settings.refresh_seconds - since
                return f"{UNKNOWN}: the last read of {self._where} failed {since:.0f}s ago (next try in {wait:.0f}s)"
        if not await self._read():
            return f"{UNKNOWN}: {self._where} could not be read just before sending"
        return self.blocking_reason()

    async def watcher(self) -> None:
        """Re-reads the switch every `refresh_seconds` until cancelled."""
        while True:
            await self.refresh()
            await asyncio.sleep(self._settings.refresh_seconds)

    @property
    def _where(self) -> str:
        """The ConfigMap, as every log line and blocking reason names it (cut: it comes from configuration)."""
        return bounded(f"ConfigMap {self._namespace}/{self._settings.name}")

    async def _read(self) -> bool:
        """One GET; True when it succeeded (state and last_success updated), False when it failed (counted)."""
        if not self.active:
            self._paused = False
            return True
        assert self._reader is not None
        try:
            state = await self._reader.read_kill_switch(self._namespace, self._settings.name, key=self._settings.key)
        except Exception as exc:  # the reader promises not to raise; degrade, never crash
            log.warning("kill switch read raised: %s", bounded(repr(exc)))
            state = None
        self.reads += 1
        if state is None:
            self.failures += 1
            self._failed_at = self._clock()
            if not self._failing:
                log.warning("cannot read the kill switch %s: evictions hold once it is unknown", self._where)
            self._failing = True
            return False
        self._failing = False
        self._failed_at = None
        if state != self._paused:
            log.warning("kill switch %s: evictions %s", self._where, "PAUSED" if state else "resumed")
        self._paused = state
        self.last_success = self._clock()
        return True
