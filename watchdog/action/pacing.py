"""How often the agent may act: hysteresis, cooldowns, a token bucket, evicted-pod memory and retry backoff.

Eviction loops are the descheduler's most reported failure (kubernetes-sigs/descheduler #424, #626, #707, #994,
#1695): a pod is evicted, lands back, and is evicted again. The pacer is what stops that here. It is separate from
the rules (decision.py) so the same rules can be replayed without it, and from the evictor so its state can be
tested on a simulated clock. PURE: no I/O, no asyncio; the clock is an argument.

`pace()` only checks; `record()` is where an attempt takes its token and starts its cooldowns, so a cycle that is
paused (kill switch) or never sent costs nothing.

Every guarantee here runs on the clock the caller passes as `now`, and that clock must be MONOTONIC: the agent
passes `time.monotonic()` (wall time is only for the timestamps of Events and audit lines), a replay passes the
tick count times the tick length. A wall-clock step (NTP, a VM resumed) would otherwise end every cooldown at once
(forward) or stretch them (back). Hysteresis follows the same rule: how long a finding has held is measured from
the pacing time of the tick it started on (`pace(..., tick=)` records each tick's time), never from the finding's
wall-clock `since`.

A restart must not be a way around any of this. A pacer built with `started=<clock now>` (what the agent's
ActionStage does at process start) begins with an EMPTY bucket: its first send waits 1/rate (30 s at the default
2/min), so an agent in a crash loop cannot evict once per restart. `restore()` replays the attempts the cluster
remembers (the agent's own Events) into the cooldowns, the evicted-pod memory and the lineage memory. A pacer built
without `started` (replays, `plan()`) begins full, as an agent that has been running a while.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, replace
from typing import Collection, Iterable, Mapping

from watchdog.action.lineage import Lineage, lineage_key, next_lineage
from watchdog.action.vm_cooldown import MigrationMemory
from watchdog.config.action import ActionPolicy
from watchdog.model import (REPORT_ONLY_KINDS, Attribution, Decision, EvictionRequest, EvictionResult, Finding,
                            FindingKind, PodInfo, PodRef)

# Results that went to (or, in observe mode, stood for) a real API call: they take a token.
ATTEMPTS = frozenset(
    {
        EvictionResult.EVICTED,
        EvictionResult.DRY_RUN,
        EvictionResult.OBSERVED,
        EvictionResult.MIGRATING,
        EvictionResult.BLOCKED_PDB,
        EvictionResult.BLOCKED,
        EvictionResult.GONE,
        EvictionResult.ERROR,
        EvictionResult.RATE_LIMITED,  # only ever recorded as the API server's answer (APF 429), never pacing's own
    }
)
# A PDB that allows no disruption answers 429 without Retry-After (kubernetes pkg/registry/core/pod/storage/
# eviction.go, checkAndDecrement): back off ourselves.
RETRIED = frozenset(
    {EvictionResult.BLOCKED_PDB, EvictionResult.BLOCKED, EvictionResult.ERROR, EvictionResult.RATE_LIMITED}
)
# The detail of a decision whose pod already has a send queued (the agent's evictor sends beside the tick): that
# send accounts for the pod, so the evictor neither counts nor audits this one.
IN_FLIGHT = "a send for this pod is queued"
# Attempts that went through (or, by mode, stand for one that would have): they start every cooldown. A launcher
# pod's also starts its VMI's migration cooldown (vm_cooldown.py).
DONE = frozenset({EvictionResult.EVICTED, EvictionResult.DRY_RUN, EvictionResult.OBSERVED, EvictionResult.MIGRATING})


@dataclass(slots=True)
class TokenBucket:
    """`rate_per_second` tokens accrue up to `capacity`, from `tokens` at `updated` (None: from the first refill)."""

    capacity: float
    rate_per_second: float
    tokens: float
    updated: float | None = None

    def refill(self, now: float) -> float:
        if self.updated is not None and now > self.updated:
            self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate_per_second)
        self.updated = now if self.updated is None else max(self.updated, now)
        return self.tokens

    def take(self, now: float) -> None:
        self.refill(now)
        self.tokens = max(self.tokens - 1.0, -self.capacity)


@dataclass(frozen=True, slots=True)
class Backoff:
    delay: float
    until: float


@dataclass(frozen=True, slots=True)
class PastAttempt:
    """An attempt made before this pacer existed (an earlier run of the agent), as `restore()` takes it."""

    pod: PodRef
    result: EvictionResult  # EVICTED, DRY_RUN or OBSERVED; anything else is ignored
    timestamp: float  # on this pacer's clock
    tenant: str | None = None  # None: the pod's namespace
    owner_kind: str | None = None


class Pacer:
    """Keeps the agent from acting too soon, too often or twice on the same pod."""

    def __init__(self, policy: ActionPolicy, *, started: float | None = None) -> None:
        """`started`: the clock at process start; the bucket is then empty until it refills (first send after
        1/rate). None: the bucket starts full (replay of an agent that has been running)."""
        self._policy = policy
        self._bucket = _bucket(policy)
        if started is not None:
            self._bucket.tokens = 0.0
            self._bucket.updated = started
        self._pod_until: dict[str, float] = {}
        self._tenant_until: dict[str, float] = {}
        self._evicted_until: dict[str, float] = {}
        self._gone_until: dict[str, float] = {}  # by uid: a same-name replacement is another pod
        self._backoff: dict[str, Backoff] = {}
        self._tenants: dict[str, str] = {}
        self._owner_kinds: dict[str, str | None] = {}  # pod key → its controller's kind, for its lineage
        self._lineages: dict[str, Lineage] = {}
        self._migrations = MigrationMemory()  # KubeVirt VMs: a cooldown per VMI after each migration
        self._tick_times: deque[tuple[int, float]] = deque()  # (tick, pacing time), increasing: for hysteresis

    @property
    def policy(self) -> ActionPolicy:
        return self._policy

    def set_policy(self, policy: ActionPolicy, *, now: float | None = None) -> None:
        """Hot reload: keeps every memory; a changed rate or burst keeps the tokens left (at most the new burst),
        so a reload is never a way to get a fresh burst of evictions. `now` brings the old bucket up to date first."""
        old = self._policy
        self._policy = policy
        if (old.node_evictions_per_minute, old.node_eviction_burst) != (
            policy.node_evictions_per_minute,
            policy.node_eviction_burst,
        ):
            previous = self._bucket
            if now is not None:
                previous.refill(now)
            self._bucket = _bucket(policy)
            self._bucket.tokens = min(previous.tokens, self._bucket.capacity)
            self._bucket.updated = previous.updated

    def tokens(self, now: float) -> float:
        return self._bucket.refill(now)

    def pace(
        self,
        decisions: Iterable[Decision],
        *,
        now: float,
        findings: Iterable[Finding] = (),
        attribution: Attribution | None = None,
        tick: int | None = None,
        in_flight: Collection[EvictionRequest] = (),
    ) -> list[Decision]:
        """The same decisions, those still to send turned into PENDING/COOLDOWN/RATE_LIMITED/... when they must wait.

        `tick`: the tick these decisions were made on; its pacing time is remembered so a finding's persistence is
        measured on this clock from the tick it started on (None: from the finding's own `since`, for callers whose
        `now` is the sample's clock). `in_flight`: requests granted earlier and not sent yet (the evictor's queue):
        they count as granted this cycle (their pod, tenant, workload and token are taken)."""
        self._forget_expired(now)
        if tick is not None:
            self._note_tick(tick, now)
        policy = self._policy
        if attribution is not None:  # an empty list too: a VMI that left the node has moved
            self._migrations.observe(attribution.vmis.values(), now=now, policy=policy.vms)
        by_key: Mapping[str, Finding] = {f.key: f for f in findings}
        available = self._bucket.refill(now)
        granted_pods: set[str] = set()
        granted_findings: set[str] = set()
        # A grant this cycle starts its tenant's and its workload's cooldowns as surely as one recorded last cycle:
        # without this, any burst > 1 let two findings of one cycle evict two pods of one tenant (or workload).
        granted_tenants: set[str] = set()
        granted_lineages: set[str] = set()
        queued_pods = {queued.pod.key for queued in in_flight}
        for queued in in_flight:
            granted_pods.add(queued.pod.key)
            granted_findings.add(queued.finding_key)
            if policy.tenant_cooldown_seconds > 0:
                granted_tenants.add(self._tenants.get(queued.pod.key, queued.pod.namespace))
            if policy.pod_cooldown_seconds > 0:
                granted_lineages.add(self._lineage_of(queued.pod))
        paced = []
        for decision in decisions:
            if decision.result is not None or decision.request is None:
                paced.append(decision)
                continue
            request = decision.request
            if attribution is not None:
                info = attribution.pod(request.pod)
                if info is not None:
                    self.learn(info, tenant=attribution.index.tenant(info))
            if request.pod.key in queued_pods:
                wait: tuple[EvictionResult, str] | None = (EvictionResult.COOLDOWN, IN_FLIGHT)
            else:
                wait = self._wait(decision, request, by_key.get(decision.finding_key), now=now)
            if wait is None and request.pod.key in granted_pods:
                wait = (EvictionResult.COOLDOWN, "already chosen for another finding this cycle")
            if wait is None and decision.finding_key in granted_findings:
                wait = (EvictionResult.RATE_LIMITED, "at most one eviction per finding per cycle")
            if wait is None and available - len(granted_pods) < 1.0:
                rate = self._policy.node_evictions_per_minute
                burst = self._bucket.capacity
                wait = (EvictionResult.RATE_LIMITED, f"token bucket empty ({rate:g}/min, burst {burst:g})")
            tenant = self._tenants.get(request.pod.key, request.pod.namespace)
            lineage = self._lineage_of(request.pod)
            if wait is None and tenant in granted_tenants:
                wait = (EvictionResult.COOLDOWN, f"tenant cooldown for {tenant} (another of its pods goes this cycle)")
            if wait is None and lineage in granted_lineages:
                wait = (EvictionResult.COOLDOWN, f"workload {lineage} (another of its pods goes this cycle)")
            if wait is None:
                granted_pods.add(request.pod.key)
                granted_findings.add(decision.finding_key)
                if policy.tenant_cooldown_seconds > 0:
                    granted_tenants.add(tenant)
                if policy.pod_cooldown_seconds > 0:  # a lineage's first cooldown is the pod cooldown
                    granted_lineages.add(lineage)
                paced.append(decision)
            else:
                paced.append(replace(decision, result=wait[0], detail=wait[1]))
        return paced

    def learn(self, pod: PodInfo, *, tenant: str | None = None) -> None:
        """Note what the cooldowns key on besides the name: the pod's tenant and its controller's kind.

        ``tenant`` is the pod's tenant as the tick's pod index counts it (``PodIndex.tenant``), the one carrier of
        the tenant rule; the pacer never derives it from a policy field. None (a pod re-read from the API right
        before a send, which knows no tenant rule) keeps the tenant learned from the index; a pod never learned
        with one counts under its namespace."""
        if len(self._tenants) > 10_000:
            self._tenants.clear()
            self._owner_kinds.clear()
        key = pod.ref.key
        if tenant is not None:
            self._tenants[key] = tenant
        self._owner_kinds[key] = pod.owner_kind
        self._migrations.learn(pod)

    def tenant(self, pod_key: str) -> str | None:
        """The tenant last learned for a pod key, if any."""
        return self._tenants.get(pod_key)

    def owner_kind(self, pod_key: str) -> str | None:
        """The controller kind last learned for a pod key, if any."""
        return self._owner_kinds.get(pod_key)

    def hold(self, request: EvictionRequest, *, now: float) -> None:
        """Back a pod off without taking a token: the send was stopped at the last moment (the pod, re-read, turned
        out protected), so the next cycles' stale decisions do not re-read it every cycle."""
        previous = self._backoff.get(request.pod.key)
        self._backoff[request.pod.key] = self._next_backoff(previous, now=now, retry_after=None)

    def restore(self, attempts: Iterable[PastAttempt]) -> int:
        """Start the cooldowns, evicted-pod memory and lineage memory of attempts an earlier run made (oldest first,
        so lineage repeats count as they did). Takes no token. Returns how many were used."""
        used = 0
        for attempt in sorted(attempts, key=lambda a: a.timestamp):
            if attempt.result not in DONE:
                continue
            key = attempt.pod.key
            if attempt.tenant:
                self._tenants.setdefault(key, attempt.tenant)
            self._owner_kinds.setdefault(key, attempt.owner_kind)
            self._remember_done(attempt.pod, attempt.result, at=attempt.timestamp)
            used += 1
        return used

    def record(
        self, request: EvictionRequest, result: EvictionResult, *, now: float, retry_after: float | None = None
    ) -> None:
        """Learn from what happened to a request: take a token, start cooldowns, back off or forget."""
        if result not in ATTEMPTS:
            return
        self._bucket.take(now)
        pod = request.pod.key
        policy = self._policy
        if result in RETRIED:
            self._backoff[pod] = self._next_backoff(self._backoff.get(pod), now=now, retry_after=retry_after)
            return
        self._backoff.pop(pod, None)
        if result is EvictionResult.GONE:
            # 404 (or 409: replaced) while the pod cache still lists it: without a memory the same request would go
            # out again with every token until the watch catches up.
            self._gone_until[_identity(request)] = now + policy.evicted_memory_seconds
            return
        # Dry-run and observe start the same cooldowns an eviction would: the report then matches enforce mode,
        # and a standing finding is not re-sent (nor re-announced as an Event) every cycle.
        self._remember_done(request.pod, result, at=now)
        self._migrations.requested(pod, now=now, policy=policy.vms)

    def _remember_done(self, ref: PodRef, result: EvictionResult, *, at: float) -> None:
        policy = self._policy
        pod = ref.key
        self._pod_until[pod] = max(self._pod_until.get(pod, at), at + policy.pod_cooldown_seconds)
        tenant = self._tenants.get(pod, ref.namespace)
        self._tenant_until[tenant] = max(self._tenant_until.get(tenant, at), at + policy.tenant_cooldown_seconds)
        if result is EvictionResult.EVICTED:
            self._evicted_until[pod] = max(self._evicted_until.get(pod, at), at + policy.evicted_memory_seconds)
        lineage = self._lineage_of(ref)
        self._lineages[lineage] = next_lineage(
            self._lineages.get(lineage),
            now=at,
            base_seconds=policy.pod_cooldown_seconds,
            max_seconds=policy.owner_cooldown_max_seconds,
            window_seconds=policy.owner_repeat_window_seconds,
        )

    def _next_backoff(self, previous: Backoff | None, *, now: float, retry_after: float | None) -> Backoff:
        policy = self._policy
        delay = policy.retry_backoff_initial_seconds if previous is None else previous.delay * 2
        delay = min(delay, policy.retry_backoff_max_seconds)
        return Backoff(delay, now + max(delay, retry_after or 0.0))

    def _lineage_of(self, ref: PodRef) -> str:
        return lineage_key(namespace=ref.namespace, name=ref.name, owner_kind=self._owner_kinds.get(ref.key))

    def _wait(
        self, decision: Decision, request: EvictionRequest, finding: Finding | None, *, now: float
    ) -> tuple[EvictionResult, str] | None:
        policy = self._policy
        pod = request.pod.key
        if finding is not None:
            needed = policy.for_kind(finding.kind).for_seconds
            lasted = now - self._started_at(finding)
            if lasted < needed:
                return EvictionResult.PENDING, f"persisted {lasted:.0f}s of the {needed:g}s required"
        if self._evicted_until.get(pod, -1.0) > now:
            return EvictionResult.ALREADY_EVICTED, f"{pod} was evicted and is still remembered as terminating"
        if self._gone_until.get(_identity(request), -1.0) > now:
            return EvictionResult.GONE, f"the API server said {pod} no longer exists; remembered as gone"
        backoff = self._backoff.get(pod)
        if backoff and backoff.until > now:
            return EvictionResult.COOLDOWN, f"backing off {backoff.delay:g}s after a refused attempt on {pod}"
        if self._pod_until.get(pod, -1.0) > now:
            return EvictionResult.COOLDOWN, f"pod cooldown for {pod} ({self._pod_until[pod] - now:.0f}s left)"
        lineage_name = self._lineage_of(request.pod)
        lineage = self._lineages.get(lineage_name)
        if lineage is not None and lineage.until > now:
            return EvictionResult.COOLDOWN, f"workload {lineage_name} was {lineage.describe(now)}"
        migrated = self._migrations.wait(pod, now=now)
        if migrated is not None:
            return EvictionResult.COOLDOWN, migrated
        tenant = self._tenants.get(pod, request.pod.namespace)
        if self._tenant_until.get(tenant, -1.0) > now:
            left = self._tenant_until[tenant] - now
            return EvictionResult.COOLDOWN, f"tenant cooldown for {tenant} ({left:.0f}s left)"
        return None

    def _note_tick(self, tick: int, now: float) -> None:
        times = self._tick_times
        if times and tick <= times[-1][0]:
            return  # a tick paced twice (an alert-driven cycle) keeps its first time
        times.append((tick, now))
        # Kept as long as any persistence requirement can look back (plus a margin); an older tick's finding is
        # measured from the oldest tick kept, which only ever makes it look younger: safe.
        horizon = max(self._policy.for_kind(kind).for_seconds for kind in _PACED_KINDS) + 60.0
        while len(times) > 2 and times[1][1] <= now - horizon:
            times.popleft()

    def _started_at(self, finding: Finding) -> float:
        """The pacing time of the tick the finding started on: the first recorded tick at or after it."""
        times = self._tick_times
        if not times:
            return finding.since
        at = bisect_left(times, finding.first_tick, key=lambda entry: entry[0])
        return times[min(at, len(times) - 1)][1]

    def _forget_expired(self, now: float) -> None:
        for table in (self._pod_until, self._tenant_until, self._evicted_until, self._gone_until):
            for key in [k for k, until in table.items() if until <= now]:
                del table[key]
        # A backoff is kept a while after it expires so the next refusal doubles it.
        horizon = self._policy.retry_backoff_max_seconds * 2
        for key in [k for k, b in self._backoff.items() if b.until + horizon <= now]:
            del self._backoff[key]
        for key in [k for k, lineage in self._lineages.items() if lineage.forget_at <= now]:
            del self._lineages[key]
        self._migrations.forget_expired(now)


# The kinds the policy sets a persistence for: every kind that may lead to an eviction.
_PACED_KINDS = tuple(kind for kind in FindingKind if kind not in REPORT_ONLY_KINDS)


def _identity(request: EvictionRequest) -> str:
    return request.pod.uid or request.pod.key


def _bucket(policy: ActionPolicy) -> TokenBucket:
    capacity = float(policy.node_eviction_burst)
    return TokenBucket(capacity=capacity, rate_per_second=policy.node_evictions_per_minute / 60.0, tokens=capacity)
