"""The action stage: turn findings into at most a few safe, paced, audited evictions.

decide (decision.py, pure rules) → pace (pacing.py, pure clocked state) → act (evictor.py, the only module that
calls the Eviction API). `ActionStage` is what the service runs each cycle; `plan()` is the same rules and pacing
without any I/O, for `gpu-watchdog replay`.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from watchdog.action.audit import AuditLog, audit_record
from watchdog.action.decision import decide
from watchdog.action.eligibility import protection, refusal, tenant_of
from watchdog.action.evictor import EvictionApi, Evictor
from watchdog.action.killswitch import KillSwitch
from watchdog.action.pacing import Pacer
from watchdog.config.action import ActionPolicy
from watchdog.model import ActionOutcome, Attribution, Decision, EvictionResult, Finding, Mode

__all__ = [
    "ActionStage",
    "AuditLog",
    "EvictionApi",
    "Evictor",
    "KillSwitch",
    "Pacer",
    "audit_record",
    "decide",
    "describe",
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
    ) -> None:
        self._policy = policy
        self._clock = clock
        self.pacer = Pacer(policy)
        self.evictor = Evictor(api, policy=policy, pacer=self.pacer, audit=audit, clock=clock, node=node, paused=paused)
        self.last_decisions: list[Decision] = []

    @property
    def policy(self) -> ActionPolicy:
        return self._policy

    @property
    def counts(self) -> Mapping[tuple[str, str, str], int]:
        """(result, reason, namespace) → n, for gpu_watchdog_evictions_total."""
        return self.evictor.counts

    def set_policy(self, policy: ActionPolicy) -> None:
        """Hot reload: new rules and mode from the next cycle on; cooldowns and backoffs are kept."""
        self._policy = policy
        self.pacer.set_policy(policy)
        self.evictor.set_policy(policy)

    async def run_cycle(self, findings: Iterable[Finding], attribution: Attribution) -> list[ActionOutcome]:
        findings = list(findings)
        now = self._clock()
        decisions = decide(findings, attribution, policy=self._policy, now=now)
        paced = self.pacer.pace(decisions, now=now, findings=findings, attribution=attribution)
        self.last_decisions = paced
        return await self.evictor.act(paced)


def would_be(mode: Mode) -> EvictionResult:
    """The result a request let through would get, when nothing is sent (replay)."""
    return {Mode.OBSERVE: EvictionResult.OBSERVED, Mode.DRY_RUN: EvictionResult.DRY_RUN}.get(
        mode, EvictionResult.EVICTED
    )


def plan(
    findings: Iterable[Finding],
    attribution: Attribution,
    policy: ActionPolicy,
    now: float,
    *,
    pacer: Pacer | None = None,
) -> list[Decision]:
    """decide + pace, no I/O. Decisions left with result None would be sent; pass the same `pacer` across the
    cycles of a replay so cooldowns and the token bucket carry over (it records each would-be send)."""
    findings = list(findings)
    pacer = pacer or Pacer(policy)
    decisions = decide(findings, attribution, policy=policy, now=now)
    paced = pacer.pace(decisions, now=now, findings=findings, attribution=attribution)
    for decision in paced:
        if decision.result is None and decision.request is not None:
            pacer.record(decision.request, would_be(policy.mode), now=now)
    return paced


def describe(decision: Decision, mode: Mode) -> dict[str, Any]:
    """One entry of a replay report's `evictions` list."""
    request = decision.request
    result = decision.result or would_be(mode)
    return {
        "namespace": decision.namespace,
        "pod": decision.pod,
        "priority": request.priority if request else None,
        "finding": decision.finding_key,
        "finding_kind": decision.finding_kind.value,
        "protects": [
            {"namespace": ref.namespace, "pod": ref.name, "priority": priority}
            for ref, priority in (request.protects if request else ())
        ],
        "result": result.value,
        "detail": decision.detail,
    }
