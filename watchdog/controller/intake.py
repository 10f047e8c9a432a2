"""How much of one webhook request the controller takes on, and the pod lists it shares while doing so.

A single Alertmanager notification can carry thousands of alerts (`max_alerts: 0` is the default: no limit), and
handling them one by one under the controller's global lock, with a pod list per alert, makes every other request
wait and costs an API call per alert (docs/alerting.md, "Large notifications"). So a request is split before the
lock: firings already handled are answered from memory, at most ``limit`` new ones are taken on, and
the rest are answered as skipped (Alertmanager brings them again with the group's next notification); a request left
with nothing to act on never waits for the lock. While one request is handled, each namespace's pods are listed once
and listed again only after an eviction was sent there, so the API calls per alert stay O(1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from watchdog.controller.outcome import PodReader
from watchdog.controller.webhook import AlertTarget
from watchdog.model import PodInfo


@dataclass
class Intake:
    """One request's alerts in payload order: a finished summary (a known duplicate) or a target to act on."""

    slots: list[dict | AlertTarget] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def acting(self) -> list[AlertTarget]:
        return [slot for slot in self.slots if isinstance(slot, AlertTarget)]

    def results(self, handled: list[dict]) -> list[dict]:
        """Every alert's summary in payload order, given the summaries of :attr:`acting` in their order."""
        answers = iter(handled)
        return [next(answers) if isinstance(slot, AlertTarget) else slot for slot in self.slots]


def take_in(
    targets: list[AlertTarget], *, seen: Callable[[tuple[str, str]], str | None], limit: int,
    duplicate: Callable[[AlertTarget, str], dict],
) -> Intake:
    """Known firings answered by ``duplicate``, the first ``limit`` others taken on, the rest skipped."""
    intake = Intake()
    taken = 0
    for target in targets:
        previous = seen(target.dedupe_key)
        if previous is not None:
            intake.slots.append(duplicate(target, previous))
        elif taken < limit:
            intake.slots.append(target)
            taken += 1
        else:
            intake.skipped.append(f"{target.alertname}: over the limit of {limit} alerts to act on per request; "
                                  "a later delivery handles it")
    return intake


class SharedPods:
    """Pods per namespace for one request: listed once (a failure too is kept), again after :meth:`changed`."""

    def __init__(self, pods: PodReader) -> None:
        self._pods = pods
        self._listed: dict[str, list[PodInfo] | Exception] = {}

    async def in_namespace(self, namespace: str) -> list[PodInfo]:
        listed = self._listed.get(namespace)
        if listed is None:
            try:
                listed = await self._pods.list_pods(namespace=namespace)
            except Exception as exc:  # noqa: BLE001 - kept, so the request's next alerts there do not ask again
                listed = exc
            self._listed[namespace] = listed
        if isinstance(listed, Exception):
            raise listed.with_traceback(None)
        return listed

    def changed(self, namespace: str) -> None:
        """An eviction was sent in ``namespace``: its pods are listed afresh for the next alert."""
        self._listed.pop(namespace, None)
