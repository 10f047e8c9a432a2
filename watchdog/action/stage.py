"""The action stage as the agent runs it: decide + pace + act each cycle, with memory that survives a restart.

The pacer's memory (cooldowns, evicted pods, lineages) lives in the process; an agent that restarts — a rollout, an
OOM kill, a crash loop — would otherwise start with none and a full bucket, and evict again at once what it evicted
a minute before. So an ActionStage starts its bucket empty (the first send waits 1/rate) and `restore_from_api()`
reads this node's recent GpuWatchdogEvicted / GpuWatchdogDryRun Events back into the pacer, once, at agent start.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable, Mapping, Protocol

from watchdog.action.audit import AuditLog
from watchdog.action.decision import decide
from watchdog.action.evictor import EVENT_REASONS, EvictionApi, Evictor, SendGate
from watchdog.action.pacing import DONE, Pacer, PastAttempt
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
    ) -> None:
        """`kill_switch` must be given: the KillSwitch, or None when no switch is configured (never paused).
        `budget`: the cluster-wide eviction budget a send takes a slot of; None means no cluster-wide ceiling."""
        self._policy = policy
        self._clock = clock
        self._node = node
        self._api = api
        self.pacer = Pacer(policy, started=clock())  # empty bucket at process start: no burst per restart
        self.evictor = Evictor(
            api, policy=policy, pacer=self.pacer, audit=audit, clock=clock, node=node, kill_switch=kill_switch,
            recheck_pods=True, budget=budget,
        )
        self.last_decisions: list[Decision] = []
        self.restored = 0  # attempts read back by restore_from_api()
        self.restore_failures = 0

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
        self.pacer.set_policy(policy, now=self._clock())
        self.evictor.set_policy(policy)

    def restore(self, records: Iterable[RecordedEvictionLike]) -> int:
        """Feed an earlier run's attempts (this node's Events) to the pacer as past attempts; returns how many."""
        now = self._clock()
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

    async def run_cycle(self, findings: Iterable[Finding], attribution: Attribution) -> ActionReport:
        findings = list(findings)
        now = self._clock()
        decisions = decide(findings, attribution, policy=self._policy, now=now)
        paced = self.pacer.pace(decisions, now=now, findings=findings, attribution=attribution)
        self.last_decisions = paced
        return await self.evictor.act(paced)
