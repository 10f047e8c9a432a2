"""The action stage: turn findings into at most a few safe, paced, audited evictions.

decide (decision.py, pure rules) → pace (pacing.py, pure clocked state) → act (evictor.py, the only module that
calls the Eviction API). `ActionStage` is what the service runs each cycle; `plan()` (planning.py) is the same rules
and pacing without any I/O, for replay and scenario runs; `effective_policy()` is the runtime overlay both apply.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

from watchdog.action.audit import AuditLog, audit_record
from watchdog.action.decision import decide
from watchdog.action.eligibility import protection, refusal, tenant_of
from watchdog.action.evictor import EvictionApi, Evictor, SendGate
from watchdog.action.killswitch import KillSwitch
from watchdog.action.pacing import Pacer
from watchdog.action.planning import effective_policy, plan, would_be
from watchdog.config.action import ActionPolicy
from watchdog.model import ActionOutcome, Attribution, Decision, Finding

__all__ = [
    "ActionStage",
    "AuditLog",
    "EvictionApi",
    "Evictor",
    "KillSwitch",
    "Pacer",
    "audit_record",
    "SendGate",
    "decide",
    "effective_policy",
    "plan",
    "protection",
    "refusal",
    "tenant_of",
    "would_be",
]


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
        paused: Callable[[], bool] = lambda: False,
        kill_switch: SendGate | None = None,
    ) -> None:
        self._policy = policy
        self._clock = clock
        self.pacer = Pacer(policy)
        self.evictor = Evictor(
            api, policy=policy, pacer=self.pacer, audit=audit, clock=clock, node=node, paused=paused,
            kill_switch=kill_switch,
        )
        self.last_decisions: list[Decision] = []

    @property
    def policy(self) -> ActionPolicy:
        return self._policy

    @property
    def counts(self) -> Mapping[tuple[str, str, str], int]:
        """(result, reason, namespace) → n, for gpu_watchdog_evictions_total."""
        return self.evictor.counts

    def set_policy(self, policy: ActionPolicy) -> None:
        """Hot reload: new rules and mode from the next cycle on; cooldowns, backoffs and spent tokens are kept."""
        self._policy = policy
        self.pacer.set_policy(policy, now=self._clock())
        self.evictor.set_policy(policy)

    async def run_cycle(self, findings: Iterable[Finding], attribution: Attribution) -> list[ActionOutcome]:
        findings = list(findings)
        now = self._clock()
        decisions = decide(findings, attribution, policy=self._policy, now=now)
        paced = self.pacer.pace(decisions, now=now, findings=findings, attribution=attribution)
        self.last_decisions = paced
        return await self.evictor.act(paced)
