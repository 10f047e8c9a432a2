"""The cluster-wide pause button: a ConfigMap key that, while "true", turns every eviction into PAUSED.

The evictor asks `paused()` synchronously once per decision, so the ConfigMap is read on a timer by `watcher()`
and the last answer is kept. An unreadable ConfigMap keeps the last known state (and is counted): the switch
is for operators to stop the agent quickly, and a flapping API must neither unpause nor spam the log.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from watchdog.config.action import KillSwitch as KillSwitchSettings

log = logging.getLogger(__name__)


class KillSwitchReader(Protocol):
    """watchdog.kube.KubeEvictions.read_kill_switch: True/False, or None when the ConfigMap could not be read."""

    async def read_kill_switch(self, namespace: str, configmap_name: str, key: str = "paused") -> bool | None: ...


class KillSwitch:
    """Caches the kill switch's state; `paused` is the callable the Evictor takes."""

    def __init__(self, reader: KillSwitchReader | None, *, settings: KillSwitchSettings, namespace: str) -> None:
        self._reader = reader
        self._settings = settings
        self._namespace = settings.namespace or namespace
        self._paused = False
        self.failures = 0
        self.reads = 0

    def paused(self) -> bool:
        return self._paused

    def set_settings(self, settings: KillSwitchSettings, *, namespace: str) -> None:
        self._settings = settings
        self._namespace = settings.namespace or namespace

    async def refresh(self) -> bool:
        """Read the ConfigMap once; returns the state now in force."""
        if self._reader is None or not self._settings.enabled:
            self._paused = False
            return False
        try:
            state = await self._reader.read_kill_switch(self._namespace, self._settings.name, key=self._settings.key)
        except Exception as exc:  # the reader promises not to raise; degrade, never crash
            log.warning("kill switch read raised: %r", exc)
            state = None
        self.reads += 1
        if state is None:
            self.failures += 1
        elif state != self._paused:
            log.warning("kill switch %s/%s: evictions %s", self._namespace, self._settings.name,
                        "PAUSED" if state else "resumed")
            self._paused = state
        return self._paused

    async def watcher(self) -> None:
        """Re-reads the switch every `refresh_seconds` until cancelled."""
        while True:
            await self.refresh()
            await asyncio.sleep(self._settings.refresh_seconds)
