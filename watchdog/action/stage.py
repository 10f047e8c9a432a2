"""The action stage as the agent runs it: decide + pace + act each cycle, with memory that survives a restart.

The pacer's memory (cooldowns, evicted pods, lineages) lives in the process; an agent that restarts — a rollout, an
OOM kill, a crash loop — would otherwise start with none and a full bucket, and evict again at once what it evicted
a minute before. So an ActionStage starts its bucket empty (the first send waits 1/rate) and `restore_from_api()`
reads this node's recent GpuWatchdogEvicted / GpuWatchdogDryRun Events back into the pacer, once, at agent start.

The tick never waits on the API server. `run_cycle` decides, paces and settles at once (no I/O); a request that
must go to the API server is put on a small bounded queue that `sender()` — a task beside the tick loop — works
through. Each queued send carries the pacing time of the tick it was decided on, and one that would go out more
than `max_decision_age_seconds` after it is dropped as `stale` (evictor.py): a slow API server delays evictions,
never the sampling, detection or /metrics, and never makes an eviction act on an old reading. Requests still
queued count as granted for the next cycles' pacing (their pod, tenant, workload and token), so a slow send is
never doubled. Without a running sender (a test driving cycles one by one) the sends go inline, as before.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Protocol

from watchdog.action.audit import AuditLog
from watchdog.action.evictor import EVENT_REASONS, EvictionApi, Evictor, SendGate
from watchdog.action.pacing import DONE, Pacer, PastAttempt
from watchdog.action.planning import decide_and_pace
from watchdog.action.send_budget import SendBudget
from watchdog.config.action import ActionPolicy
from watchdog.config.runtime import RuntimePolicy
from watchdog.model import ActionReport, Attribution, Decision, EvictionResult, Finding, PodRef

log = logging.getLogger(__name__)

# The Event reasons that stand for an attempt that went through: what a restarted agent must remember.
RESTORED_REASONS: Mapping[str, EvictionResult] = {
    reason: result for result, (reason, _type) in EVENT_REASONS.items() if result in DONE
}


class RecordedEvictionLike(Protocol):
    """What watchdog.kube.eviction.RecordedEviction carries."""

    namespace: str
    name: str
    uid: str
    reason: str
    age_seconds: float
    tenant: str | None
    owner_kind: str | None


@dataclass(frozen=True, slots=True)
class QueuedSend:
    """A request pacing let through, waiting for the sender: decided on `tick`, at pacing time `decided_at`."""

    decision: Decision
    tick: int | None
    decided_at: float


# Sends waiting beside the tick at most: pacing lets through one per token, so more means the API server is far
# behind, and a send that waits longer would go out stale anyway.
QUEUE_LIMIT = 8


class ActionStage:
    """decide + pace + act, with state (pacing memory, counts) kept across cycles."""

    def __init__(
        self,
        policy: ActionPolicy,
        api: EvictionApi | None,
        *,
        clock: Callable[[], float],
        audit: AuditLog,
        node: str,
        kill_switch: SendGate | None,
        budget: SendBudget | None = None,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        """`kill_switch` must be given: the KillSwitch, or None when no switch is configured (never paused).
        `budget`: the cluster-wide eviction budget a send takes a slot of; None means no cluster-wide ceiling.
        `clock`: wall time, for Events and audit lines; `monotonic`: the clock every guarantee runs on (cooldowns,
        hysteresis, the token bucket, backoffs, decision age); None means `clock` (a simulated world's one clock)."""
        self._policy = policy
        self._clock = clock
        self._monotonic = monotonic or clock
        self._node = node
        self._api = api
        self.pacer = Pacer(policy, started=self._monotonic())  # empty bucket at process start: no burst per restart
        self.evictor = Evictor(
            api, policy=policy, pacer=self.pacer, audit=audit, clock=clock, node=node, kill_switch=kill_switch,
            recheck_pods=True, budget=budget, monotonic=self._monotonic,
        )
        self.last_decisions: list[Decision] = []
        self.restored = 0  # attempts read back by restore_from_api()
        self.restore_failures = 0
        self._queue: asyncio.Queue[QueuedSend] | None = None  # set while sender() runs
        self._in_flight: list[QueuedSend] = []  # queued or being sent
        self.queue_full = 0  # sends refused because the queue was full

    @property
    def policy(self) -> ActionPolicy:
        return self._policy

    @property
    def counts(self) -> Mapping[tuple[str, str, str], int]:
        """(result, reason, namespace) → n, for gpu_watchdog_evictions_total."""
        return self.evictor.counts

    def apply_runtime(self, runtime: RuntimePolicy) -> None:
        """A policy load, as resolved for this agent (own namespace protected, tenant label, --mode)."""
        self.set_policy(runtime.action)

    def set_policy(self, policy: ActionPolicy) -> None:
        """Hot reload: new rules and mode from the next cycle on; cooldowns, backoffs and spent tokens are kept."""
        self._policy = policy
        self.pacer.set_policy(policy, now=self._monotonic())
        self.evictor.set_policy(policy)

    def restore(self, records: Iterable[RecordedEvictionLike]) -> int:
        """Feed an earlier run's attempts (this node's Events) to the pacer as past attempts; returns how many."""
        now = self._monotonic()
        attempts = [
            PastAttempt(
                pod=PodRef(record.namespace, record.name, record.uid),
                result=RESTORED_REASONS[record.reason],
                timestamp=now - max(0.0, record.age_seconds),
                tenant=record.tenant,
                owner_kind=record.owner_kind,
            )
            for record in records
            if record.reason in RESTORED_REASONS
        ]
        used = self.pacer.restore(attempts)
        self.restored += used
        return used

    async def restore_from_api(self) -> int:
        """Once, at agent start: read this node's recent eviction Events back into the pacer. Never raises: an API
        that cannot be read is logged and counted (`restore_failures`), and the agent starts with only its empty
        bucket to hold it back."""
        if self._api is None:
            return 0
        policy = self._policy
        within = max(
            policy.pod_cooldown_seconds,
            policy.tenant_cooldown_seconds,
            policy.evicted_memory_seconds,
            policy.owner_cooldown_max_seconds + policy.owner_repeat_window_seconds,
        )
        try:
            records = await self._api.recent_evictions(  # type: ignore[attr-defined]
                self._node, reasons=tuple(RESTORED_REASONS), within_seconds=within
            )
        except Exception as exc:  # KubeError (unreachable, 403 on list events) or a client without the call
            self.restore_failures += 1
            log.warning("cannot read this node's recent evictions back; starting without their cooldowns: %r", exc)
            return 0
        used = self.restore(records)
        log.info("restored %d recent eviction attempt(s) of node %s into the cooldowns", used, self._node)
        return used

    @property
    def in_flight(self) -> tuple[QueuedSend, ...]:
        """Sends queued or under way."""
        return tuple(self._in_flight)

    def plan(
        self, findings: Iterable[Finding], attribution: Attribution, *, tick: int | None = None
    ) -> tuple[list[Decision], float]:
        """decide + pace on the monotonic clock, with the queued sends counted as granted (planning.decide_and_pace,
        the function replay runs too); returns the paced decisions and the pacing time they were made at."""
        now = self._monotonic()
        paced = decide_and_pace(findings, attribution, self._policy, now, pacer=self.pacer, tick=tick,
                                in_flight=[queued.decision.request for queued in self._in_flight
                                           if queued.decision.request is not None])
        self.last_decisions = paced
        return paced, now

    async def run_cycle(
        self, findings: Iterable[Finding], attribution: Attribution, *, tick: int | None = None
    ) -> ActionReport:
        """One cycle: plan, then settle at once and queue the sends (inline while no sender runs)."""
        paced, now = self.plan(findings, attribution, tick=tick)
        return await self.dispatch(paced, tick=tick, decided_at=now)

    async def dispatch(self, paced: list[Decision], *, tick: int | None, decided_at: float) -> ActionReport:
        """Settle the paced decisions; hand those that need the API server to the sender (inline without one)."""
        if self._queue is None:
            return await self.evictor.act(paced)
        report, to_send = self.evictor.settle(paced)
        refused = []
        for decision in to_send:
            queued = QueuedSend(decision, tick, decided_at)
            try:
                self._queue.put_nowait(queued)
            except asyncio.QueueFull:
                self.queue_full += 1
                log.warning("eviction send queue full (%d waiting): %s/%s not sent", QUEUE_LIMIT,
                            decision.namespace, decision.pod)
                self.pacer.hold(decision.request, now=self._monotonic())  # type: ignore[arg-type]
                refused.append(self.evictor.refuse(
                    decision, EvictionResult.RATE_LIMITED,
                    detail=f"{QUEUE_LIMIT} sends already wait for the API server: not queued"))
                continue
            self._in_flight.append(queued)
        if not refused:
            return report
        extra = self.evictor.drained()
        return ActionReport(outcomes=report.outcomes + tuple(o for o in refused if o is not None),
                            counted=report.counted + extra.counted)

    async def sender(self) -> None:
        """The long-running task beside the tick loop that alone talks to the Eviction API; until cancelled."""
        self._queue = asyncio.Queue(maxsize=QUEUE_LIMIT)
        try:
            while True:
                queued = await self._queue.get()
                try:
                    await self.evictor.send(queued.decision, decided_at=queued.decided_at)
                except Exception:  # the evictor promises not to raise; a bug must not end the sender
                    log.exception("eviction send for %s/%s failed", queued.decision.namespace, queued.decision.pod)
                finally:
                    self._in_flight.remove(queued)
        finally:
            self._queue = None
            self._in_flight.clear()
