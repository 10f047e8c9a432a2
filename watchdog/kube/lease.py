"""Leader election on a coordination.k8s.io/v1 Lease, so exactly one controller replica evicts at a time.

This follows client-go's tools/leaderelection (leaderelection.go tryAcquireOrRenew, acquire, renew, release):
- a candidate takes the Lease when it is absent, released (empty holderIdentity), or has not changed for the
  *record's* spec.leaseDurationSeconds (the holder's promise, not the candidate's own setting: tryAcquireOrRenew
  compares ``observedTime + oldLeaderElectionRecord.LeaseDurationSeconds``) as measured on the candidate's *own*
  clock since it last saw the record change (so clock skew between nodes does not matter; renewTime is
  informational);
- the holder renews every retryPeriod and steps down when it could not renew for renewDeadline
  (renewDeadline < leaseDuration, so it stops before anyone else may start);
- a takeover keeps acquireTime fresh and increments leaseTransitions; the holder's renewals keep both;
- every write is a PUT carrying the resourceVersion it read, so two candidates racing get one 409 Conflict and
  only one wins (optimistic concurrency in the API server's generic registry).

Why not ``kubernetes.aio.leaderelection`` (37.0.2): it reads ``time.time()`` and calls ``asyncio.sleep`` directly
(no injected clock, so tests would need real multi-second waits), refuses retry periods under one second, writes
naive local datetimes, never sets leaseTransitions, sends MicroTime fields through ``isoformat()`` (no fraction when
microsecond == 0, which the API server refuses), and only stops leading by returning from ``run``. Writing the few
rules above ourselves is smaller than working around those.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

from watchdog.kube.client import KubeApi
from watchdog.kube.errors import KubeError, KubeNotFound

log = logging.getLogger(__name__)

Callback = Callable[[], Any] | None


def micro_time(epoch: float) -> str:
    """metav1.MicroTime on the wire: RFC 3339 with exactly six fraction digits."""
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """One candidate in the election for one Lease: `run()` campaigns until cancelled, `is_leader` says whether
    this replica may act now, `release()` hands the Lease over at once (for a clean shutdown).

    `clock` (monotonic) measures expiry and renewal deadlines, `wall_clock` only fills the Lease's MicroTime
    fields, and `sleep` paces the loop: all three are injected so tests run the election on a hand-moved clock.
    The callbacks run when leadership starts and stops; a callback that raises is logged, never fatal.
    """

    def __init__(self, api: KubeApi, *, namespace: str, name: str, identity: str, lease_duration: float = 15,
                 renew_deadline: float = 10, retry_period: float = 2,
                 clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 on_started_leading: Callback = None, on_stopped_leading: Callback = None):
        if not identity:
            raise ValueError("a leader election candidate needs a non-empty identity")
        if not retry_period > 0:
            raise ValueError(f"retry_period must be positive, got {retry_period}")
        # The same checks as client-go NewLeaderElector (JitterFactor 1.2).
        if not lease_duration > renew_deadline:
            raise ValueError(f"lease_duration ({lease_duration}) must be greater than renew_deadline ({renew_deadline})")
        if not renew_deadline > 1.2 * retry_period:
            raise ValueError(f"renew_deadline ({renew_deadline}) must be greater than 1.2 × retry_period ({retry_period})")
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock = clock
        self.wall_clock = wall_clock
        self.sleep = sleep
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.counters = {"acquired": 0, "lost": 0, "errors": 0, "conflicts": 0}
        self._leading = False
        self._last_renewed: float | None = None  # clock() of our last successful write as holder
        self._observed_version: str | None = None
        self._observed_at: float = 0.0
        self._lease: dict[str, Any] | None = None
        self._released = False

    @property
    def _path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    @property
    def is_leader(self) -> bool:
        """True while leading and our last renewal is younger than the lease (never trust a stale belief)."""
        if not self._leading or self._last_renewed is None:
            return False
        return self.clock() - self._last_renewed < self.lease_duration

    @property
    def holder(self) -> str | None:
        """The holder seen in the latest read of the Lease."""
        return ((self._lease or {}).get("spec") or {}).get("holderIdentity") or None

    async def run(self) -> None:
        """Acquire, lead while renewals succeed, step down, try again; until cancelled or released."""
        self._released = False
        try:
            while not self._released:
                if not await self.try_acquire_or_renew():
                    await self.sleep(self.retry_period)
                    continue
                await self._set_leading(True)
                await self._renew_until_lost()
                if self._leading:
                    await self._set_leading(False)
        finally:
            if self._leading:  # cancelled while leading: stop acting (the lease simply expires)
                self._leading = False
                await _call(self.on_stopped_leading)

    async def _renew_until_lost(self) -> None:
        while True:
            await self.sleep(self.retry_period)
            if not self._leading:
                return  # released meanwhile
            started = self.clock()
            while not await self.try_acquire_or_renew():
                if self.clock() - started >= self.renew_deadline:
                    log.warning("%s lost lease %s/%s", self.identity, self.namespace, self.name)
                    return
                await self.sleep(self.retry_period)

    async def _set_leading(self, leading: bool) -> None:
        self._leading = leading
        self.counters["acquired" if leading else "lost"] += 1
        log.info("%s %s leading on lease %s/%s", self.identity, "started" if leading else "stopped",
                 self.namespace, self.name)
        await _call(self.on_started_leading if leading else self.on_stopped_leading)

    async def try_acquire_or_renew(self) -> bool:
        """One round of client-go's tryAcquireOrRenew; True when we hold the lease afterwards.

        Two instants matter: a record is observed when its answer *arrives* (client-go sets observedTime after the
        Get returns), so a candidate never dates it earlier than it could have seen it; our own hold counts from
        *before* the write was sent, so the holder's belief in its lease ends no later than anyone's expiry.
        """
        if self._released:
            return False
        sent, wall = self.clock(), self.wall_clock()
        try:
            try:
                lease = await self.api.request_json("GET", self._path)
            except KubeNotFound:
                self._lease = await self.api.request_json("POST", self._path.rsplit("/", 1)[0],
                                                          body=self._record(None, wall))
                self._observe(self._lease, self.clock())
                self._last_renewed = sent
                return True
            now = self.clock()
            self._lease = lease
            self._observe(lease, now)
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            if holder and holder != self.identity and self._observed_at + self._record_duration(spec) > now:
                return False
            self._lease = await self.api.request_json("PUT", self._path, body=self._record(lease, wall))
            self._observe(self._lease, self.clock())
            self._last_renewed = sent
            return True
        except KubeError as error:
            self.counters["conflicts" if error.status == 409 else "errors"] += 1
            log.debug("%s: lease %s/%s not taken: %s", self.identity, self.namespace, self.name, error)
            return False

    def _record_duration(self, spec: dict[str, Any]) -> float:
        """How long the observed record stays valid: its own leaseDurationSeconds (client-go
        leaderelection.go: ``le.observedTime.Add(time.Second * time.Duration(oldLeaderElectionRecord.
        LeaseDurationSeconds))``); our setting only when the record carries no usable value."""
        try:
            seconds = float(spec.get("leaseDurationSeconds"))
        except (TypeError, ValueError):
            return self.lease_duration
        return seconds if seconds > 0 else self.lease_duration

    def _observe(self, lease: dict[str, Any], now: float) -> None:
        version = (lease.get("metadata") or {}).get("resourceVersion")
        if version != self._observed_version:
            self._observed_version, self._observed_at = version, now

    def _record(self, current: dict[str, Any] | None, wall: float) -> dict[str, Any]:
        old_spec = (current or {}).get("spec") or {}
        renewing = current is not None and old_spec.get("holderIdentity") == self.identity
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self.lease_duration)),
            "acquireTime": old_spec.get("acquireTime") if renewing else micro_time(wall),
            "renewTime": micro_time(wall),
            "leaseTransitions": int(old_spec.get("leaseTransitions") or 0) + (0 if renewing or current is None else 1),
        }
        metadata = {"name": self.name, "namespace": self.namespace}
        if current is not None:
            metadata["resourceVersion"] = current["metadata"]["resourceVersion"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}

    async def release(self) -> bool:
        """Give the lease up now (client-go ReleaseOnCancel): holder "" so a candidate takes over at once.

        Stops ``run`` from taking it again; returns False when we did not hold it or the write failed."""
        self._released = True
        held = self._lease is not None and (self._lease.get("spec") or {}).get("holderIdentity") == self.identity
        if self._leading:
            await self._set_leading(False)
        if not held:
            return False
        wall = self.wall_clock()
        spec = {**(self._lease.get("spec") or {}), "holderIdentity": "", "leaseDurationSeconds": 1,
                "acquireTime": micro_time(wall), "renewTime": micro_time(wall)}
        try:
            self._lease = await self.api.request_json("PUT", self._path, body={**self._lease, "spec": spec})
        except KubeError as error:
            log.warning("%s could not release lease %s/%s: %s", self.identity, self.namespace, self.name, error)
            return False
        return True


async def _call(callback: Callback) -> None:
    if callback is None:
        return
    try:
        result = callback()
        if inspect.isawaitable(result):
            await result
    except Exception:  # noqa: BLE001 - a callback's failure must not break the election loop
        log.exception("leader election callback failed")
