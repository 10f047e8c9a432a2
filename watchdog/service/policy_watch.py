"""Hot reload of the policy file: a good edit takes effect at the next cycle, a bad one changes nothing.

The file is polled by modification time and size (inotify does not see ConfigMap symlink swaps reliably). An
invalid file is logged with every field and reason, counted as a failed reload, and the last good policy stays.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Awaitable, Callable

from watchdog.config import ConfigError, Policy, load_policy

log = logging.getLogger(__name__)


class PolicyWatcher:
    def __init__(
        self,
        path: str,
        *,
        apply: Callable[[Policy], None],
        on_result: Callable[[str], None],
        poll_seconds: float = 2.0,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.path = path
        self.apply = apply
        self.on_result = on_result
        self.poll_seconds = poll_seconds
        self.sleep = sleep
        self._seen = self._stamp()

    def _stamp(self) -> tuple[float, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def check(self) -> bool | None:
        """Reload if the file changed: True applied, False refused (last good kept), None unchanged."""
        stamp = self._stamp()
        if stamp == self._seen:
            return None
        self._seen = stamp
        try:
            policy = load_policy(self.path)
        except (ConfigError, OSError) as exc:
            log.error("policy reload refused, keeping the last good policy: %s", exc)
            self.on_result("failure")
            return False
        except Exception:  # noqa: BLE001 - whatever the file holds, it must never stop the agent
            log.exception("policy reload failed, keeping the last good policy")
            self.on_result("failure")
            return False
        try:
            self.apply(policy)
        except Exception:  # noqa: BLE001
            log.exception("applying the reloaded policy failed; the previous one may be partly replaced")
            self.on_result("failure")
            return False
        log.info("policy reloaded from %s", self.path)
        self.on_result("success")
        return True

    async def run(self) -> None:
        while True:
            await self.sleep(self.poll_seconds)
            try:
                self.check()
            except Exception:  # noqa: BLE001 - e.g. a stat error of a strange mount: try again next poll
                log.exception("policy watcher check failed")
