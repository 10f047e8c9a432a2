"""Hot reload of the policy file: a good edit takes effect at the next cycle, a bad one changes nothing.

The file is polled by modification time and size (inotify does not see ConfigMap symlink swaps reliably). An
invalid file is logged with every field and reason, counted as a failed reload, and the last good policy stays.
A valid file with dangerous values (watchdog.action.floor.review: enforce with no protected namespace of its own,
a priority floor above any user PriorityClass, a large burst, a zero cooldown) is applied with one warning each;
what it cannot weaken is the floor, which no policy removes.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Awaitable, Callable

from watchdog.action.floor import review
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
        if not self._changed():
            return None
        return self._finish(*self._load())

    async def poll(self) -> bool | None:
        """:meth:`check`, with the file read and validated in a worker thread: PyYAML and pydantic are pure Python,
        and a 1 MB policy parsed on the event loop stalled /metrics and the agent's tick for seconds. The policy
        is applied (and the result counted) back on the loop."""
        if not self._changed():
            return None
        return self._finish(*await asyncio.to_thread(self._load))

    def _changed(self) -> bool:
        stamp = self._stamp()
        if stamp == self._seen:
            return False
        self._seen = stamp
        return True

    def _load(self) -> tuple[Policy | None, BaseException | None]:
        try:
            return load_policy(self.path), None
        except Exception as exc:  # noqa: BLE001 - whatever the file holds, it must never stop the agent
            return None, exc

    def _finish(self, policy: Policy | None, error: BaseException | None) -> bool:
        if isinstance(error, (ConfigError, OSError)):
            log.error("policy reload refused, keeping the last good policy: %s", error)
        elif error is not None:
            log.error("policy reload failed, keeping the last good policy", exc_info=error)
        if policy is None:
            self.on_result("failure")
            return False
        for caution in review(policy.action):  # legal but dangerous: applied, and said (the floor still holds)
            log.warning("reloaded policy %s: action.%s: %s", self.path, caution.field, caution.message)
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
                await self.poll()
            except Exception:  # noqa: BLE001 - e.g. a stat error of a strange mount: try again next poll
                log.exception("policy watcher check failed")
