"""The kubelet's device assignments, refreshed on a timer and on demand, never on the scrape path.

dcgm-exporter calls PodResources List on every scrape and burns up to 10 cores on H200 MIG nodes (dcgm-exporter
issue #599); the kubelet also rate-limits the API to 100 QPS, burst 10 (kubernetes
pkg/kubelet/apis/podresources/grpc/ratelimit.go). Here a List happens every
``refresh_seconds``, plus at most one extra List per ``unknown_refresh_seconds`` when a busy device has no known
owner (a pod that started since the last List). A device still unknown after a List is negative-cached so a host
process squatting on a GPU costs no further calls; it leaves the cache as soon as a List names it.

Failure policy: any error makes the stage degraded (``ok`` False) and serves *no* assignments, so samples go out
without pod labels rather than with stale ones and downstream stages see an unhealthy attribution; the reason is
logged once per outage; retries back off exponentially (1 s doubling, capped) on the injected clock. No jitter: one
agent talks to its own node's kubelet, there is no herd to spread. ``refresh`` never raises.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Awaitable, Callable, Mapping, Protocol

from watchdog.model import ClaimDevice, DeviceAssignment

log = logging.getLogger(__name__)


class AssignmentLister(Protocol):
    """What the refresher needs from a client (``kubelet.PodResourcesClient`` in production)."""

    async def list_assignments(self) -> tuple[DeviceAssignment | ClaimDevice, ...]: ...


class KubeletAssignments:
    """Cached latest assignments with the refresh, unknown-device and backoff policy above."""

    def __init__(
        self,
        client: AssignmentLister,
        *,
        refresh_seconds: float = 10.0,
        unknown_refresh_seconds: float = 2.0,
        backoff_initial_seconds: float = 1.0,
        backoff_max_seconds: float = 60.0,
    ) -> None:
        if refresh_seconds <= 0 or unknown_refresh_seconds < 0:
            raise ValueError("refresh_seconds must be > 0 and unknown_refresh_seconds >= 0")
        if not 0 < backoff_initial_seconds <= backoff_max_seconds:
            raise ValueError("need 0 < backoff_initial_seconds <= backoff_max_seconds")
        self._client = client
        self._refresh_seconds = refresh_seconds
        self._unknown_refresh_seconds = unknown_refresh_seconds
        self._backoff_initial = backoff_initial_seconds
        self._backoff_max = backoff_max_seconds
        self._assignments: tuple[DeviceAssignment, ...] = ()
        self._claim_devices: tuple[ClaimDevice, ...] = ()
        self._known: frozenset[str] = frozenset()
        self._ok = False  # nothing listed yet: absences prove nothing until the first List succeeds
        self._next_periodic = -math.inf
        self._failures = 0
        self._retry_at = -math.inf
        self._extra_requested = False
        self._last_extra = -math.inf
        self._pending: dict[str, float] = {}  # device → when it was first reported unknown
        self._negative: set[str] = set()
        self._in_flight = False
        self._requested_in_flight = False
        self.listed_at = -math.inf  # the clock time at which the List now served was started
        self.last_error: str | None = None
        self.list_calls = 0
        self.extra_refreshes = 0
        self.errors: dict[str, int] = {}

    @property
    def assignments(self) -> tuple[DeviceAssignment, ...]:
        """The latest successful List, or () while degraded."""
        return self._assignments

    @property
    def claim_devices(self) -> tuple[ClaimDevice, ...]:
        """The DRA (claim, driver, pool, device) tuples of the latest successful List, or () while degraded; they
        become assignments once the driver's ResourceSlices name their devices (``join.resolve_claim_devices``)."""
        return self._claim_devices

    @property
    def ok(self) -> bool:
        """True when the latest List succeeded."""
        return self._ok

    @property
    def counters(self) -> Mapping[str, int]:
        """list_calls, extra_refreshes, negative_cached and errors_<kind>, for the service to export."""
        counts = {"list_calls": self.list_calls, "extra_refreshes": self.extra_refreshes}
        counts["negative_cached"] = len(self._negative)
        counts.update({f"errors_{kind}": n for kind, n in self.errors.items()})
        return counts

    def knows(self, device_id: str) -> bool:
        return device_id in self._known

    def is_negative(self, device_id: str) -> bool:
        """True when a List already ran after this device was reported unknown, and still did not name it."""
        return device_id in self._negative

    def next_due(self) -> float:
        """The earliest clock time at which ``refresh`` would call the kubelet."""
        if self._failures:
            return self._retry_at
        extra = self._last_extra + self._unknown_refresh_seconds if self._extra_requested else math.inf
        return min(self._next_periodic, extra)

    def request_refresh(self) -> None:
        """Make the periodic List due now (pods came or went on this node); a failing kubelet keeps its backoff.

        A request that arrives while a List is in flight is honoured by one more List after it, since that List
        may have been answered before the change.
        """
        self._next_periodic = -math.inf
        self._requested_in_flight = self._in_flight

    def note_unknown(self, device_uuid: str, now: float) -> bool:
        """A busy device has no known owner: ask for one extra List (rate-limited). True when newly pending.

        ``now`` is remembered so the log can say how long the device went unexplained.
        """
        if device_uuid in self._known or device_uuid in self._negative or device_uuid in self._pending:
            return False
        self._pending[device_uuid] = now
        self._extra_requested = True
        return True

    async def refresh(self, now: float) -> bool:
        """Call List if one is due at ``now``; True when a call was made. Never raises (cancellation aside)."""
        if self._in_flight or now < self.next_due():
            return False
        extra = self._extra_requested and now < self._next_periodic and not self._failures
        self._in_flight = True
        self.list_calls += 1
        try:
            listed = await self._client.list_assignments()
        except Exception as error:  # noqa: BLE001 - a failing kubelet degrades the stage, never the agent
            self._fail(error, now)
        else:
            self._succeed(tuple(listed), now)
            self.listed_at = now
        finally:
            self._in_flight = False
        if extra:
            self.extra_refreshes += 1
            self._last_extra = now
        return True

    async def close(self) -> None:
        """Close the client's channel, when the client has one."""
        close = getattr(self._client, "close", None)
        if close is not None:
            await close()

    async def refresher(
        self,
        clock: Callable[[], float],
        *,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        poll_seconds: float = 0.25,
    ) -> None:
        """Long-running agent: refresh whenever due. Polls so that ``note_unknown`` is honoured within a poll."""
        while True:
            await self.refresh(clock())
            await sleep(max(0.0, min(poll_seconds, self.next_due() - clock())))

    def _succeed(self, listed: tuple[DeviceAssignment | ClaimDevice, ...], now: float) -> None:
        if self._failures:
            log.info("kubelet PodResources recovered after %d failed List calls", self._failures)
        self._assignments = tuple(entry for entry in listed if isinstance(entry, DeviceAssignment))
        self._claim_devices = tuple(entry for entry in listed if isinstance(entry, ClaimDevice))
        listed = self._assignments
        self._known = frozenset(assignment.device_id for assignment in listed)
        self._ok = True
        self._failures = 0
        self._retry_at = -math.inf
        self.last_error = None
        self._next_periodic = -math.inf if self._requested_in_flight else now + self._refresh_seconds
        self._requested_in_flight = False
        self._negative = {device for device in self._negative if device not in self._known}
        for device, first_seen in self._pending.items():
            if device not in self._known:
                log.info("device %s busy but assigned to no pod %.1f s after first seen; not asking again", device,
                         now - first_seen)
                self._negative.add(device)
        self._pending.clear()
        self._extra_requested = False

    def _fail(self, error: Exception, now: float) -> None:
        kind = getattr(error, "kind", "error")
        self.errors[kind] = self.errors.get(kind, 0) + 1
        if not self._failures:
            log.warning("kubelet PodResources unavailable, attribution degraded (%s): %s", kind, error)
        else:
            log.debug("kubelet PodResources still failing (%s): %s", kind, error)
        self._failures += 1
        self._ok = False
        self._assignments = ()
        self._claim_devices = ()
        self._known = frozenset()
        self.last_error = f"{kind}: {error}"
        delay = min(self._backoff_max, self._backoff_initial * 2 ** min(self._failures - 1, 32))
        self._retry_at = now + delay
