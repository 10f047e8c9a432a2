"""The one actor: the only code that sends an eviction, the only code that knows the mode.

Modelled on the descheduler's PodEvictor (pkg/descheduler/evictions/evictions.go): rules decide elsewhere, this
module sends a policy/v1 Eviction (so PodDisruptionBudgets hold), handles the answers, records a Kubernetes Event
and counts every result. Every decision it is handed ends with exactly one result, counted under
(result, reason, namespace) for gpu_watchdog_evictions_total and written as one audit line.

observe sends nothing; dry-run sends only dryRun=All (the PDB check still runs server-side, so the answer says
whether the eviction would be allowed — kubernetes-and-friends.md §1); enforce evicts.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import replace
from typing import Callable, Iterable, Mapping, Protocol

from watchdog.action.audit import AuditLog, audit_record
from watchdog.action.pacing import Pacer
from watchdog.config.action import ActionPolicy
from watchdog.model import ActionOutcome, Decision, EvictionRequest, EvictionResult, Mode, PodRef

log = logging.getLogger(__name__)

COMPONENT = "gpu-watchdog"
# Results worth an Event on the pod: real attempts and their refusals, not the pending/cooldown chatter.
EVENT_REASONS: Mapping[EvictionResult, tuple[str, str]] = {
    EvictionResult.EVICTED: ("GpuWatchdogEvicted", "Warning"),
    EvictionResult.DRY_RUN: ("GpuWatchdogDryRun", "Normal"),
    EvictionResult.BLOCKED_PDB: ("GpuWatchdogEvictionBlocked", "Warning"),
    EvictionResult.BLOCKED: ("GpuWatchdogEvictionBlocked", "Warning"),
}


class EvictionReplyLike(Protocol):
    """What watchdog.kube.eviction.EvictionReply carries."""

    result: EvictionResult
    http_status: int | None
    message: str
    retry_after: float | None


class EvictionApi(Protocol):
    """The slice of watchdog.kube.KubeEvictions the evictor needs; tests use an in-memory one."""

    async def evict(self, pod: PodRef, *, dry_run: bool, grace_seconds: int | None = None) -> EvictionReplyLike: ...

    async def record_event(
        self,
        pod: PodRef,
        *,
        reason: str,
        message: str,
        type: str = "Warning",
        action: str = "Evict",
        component: str,
        host: str,
    ) -> bool: ...


class Evictor:
    """Sends (or, by mode, does not send) the requests pacing let through, and accounts for every decision."""

    def __init__(
        self,
        api: EvictionApi | None,
        *,
        policy: ActionPolicy,
        pacer: Pacer,
        audit: AuditLog,
        clock: Callable[[], float],
        node: str,
        paused: Callable[[], bool] = lambda: False,
        component: str = COMPONENT,
    ) -> None:
        self._api = api
        self._policy = policy
        self._pacer = pacer
        self._audit = audit
        self._clock = clock
        self._node = node
        self._paused = paused
        self._component = component
        self._counts: Counter[tuple[str, str, str]] = Counter()
        self._error_streak = 0
        self._hold_until = float("-inf")
        self.event_failures = 0
        # A standing finding is decided again every cycle; a refusal that merely repeats (pending, cooldown, …) is
        # counted and audited once per change, so counters and the audit log track decisions, not ticks.
        self._standing: dict[str, tuple[str, EvictionResult]] = {}
        self._seen: set[str] = set()

    @property
    def mode(self) -> Mode:
        return self._policy.mode

    @property
    def counts(self) -> Mapping[tuple[str, str, str], int]:
        """(result, reason, namespace) → how many decisions ended so; for gpu_watchdog_evictions_total."""
        return dict(self._counts)

    def set_policy(self, policy: ActionPolicy) -> None:
        self._policy = policy

    async def act(self, decisions: Iterable[Decision]) -> list[ActionOutcome]:
        """Finish every decision with one result; returns the outcomes of those that name a pod."""
        outcomes = []
        self._seen = set()
        for decision in decisions:
            outcome = await self._finish(decision)
            if outcome is not None:
                outcomes.append(outcome)
        self._standing = {key: value for key, value in self._standing.items() if key in self._seen}
        return outcomes

    async def _finish(self, decision: Decision) -> ActionOutcome | None:
        request = decision.request
        mode = self._policy.mode
        now = self._clock()
        if decision.result is not None or request is None:
            result = decision.result or EvictionResult.NO_CANDIDATE
            return self._account(decision, result, detail=decision.detail, now=now, mode=mode)
        if self._paused():
            return self._account(decision, EvictionResult.PAUSED, detail="kill switch is on", now=now, mode=mode)
        if now < self._hold_until:
            detail = f"holding off {self._hold_until - now:.0f}s after {self._error_streak} API error(s)"
            return self._account(decision, EvictionResult.RATE_LIMITED, detail=detail, now=now, mode=mode)
        if mode is Mode.OBSERVE:
            self._pacer.record(request, EvictionResult.OBSERVED, now=now)
            detail = "observe mode: nothing sent"
            return self._account(decision, EvictionResult.OBSERVED, detail=detail, now=now, mode=mode, sent=True)
        if self._api is None:
            return self._account(decision, EvictionResult.ERROR, detail="no Kubernetes API", now=now, mode=mode)
        result, status, detail, retry_after = await self._send(request, dry_run=mode is Mode.DRY_RUN)
        now = self._clock()
        self._pacer.record(request, result, now=now, retry_after=retry_after)
        self._note_errors(result, now)
        outcome = self._account(decision, result, detail=detail, now=now, mode=mode, http_status=status, sent=True)
        if result in EVENT_REASONS:
            await self._announce(request, result, mode)
        return outcome

    async def _send(
        self, request: EvictionRequest, *, dry_run: bool
    ) -> tuple[EvictionResult, int | None, str, float | None]:
        assert self._api is not None
        try:
            reply = await self._api.evict(request.pod, dry_run=dry_run, grace_seconds=self._policy.grace_seconds)
        except Exception as exc:  # the client promises not to raise; if it does, it is an error, not a crash
            log.warning("eviction of %s raised: %r", request.pod.key, exc)
            return EvictionResult.ERROR, None, f"eviction call raised {type(exc).__name__}: {exc}", None
        result = reply.result
        if dry_run and result is EvictionResult.EVICTED:
            result = EvictionResult.DRY_RUN  # the request carried dryRun=All: nothing was evicted
        if not dry_run and result is EvictionResult.DRY_RUN:
            result = EvictionResult.ERROR  # never report an eviction that did not happen as done
        return result, reply.http_status, reply.message or "", reply.retry_after

    def _note_errors(self, result: EvictionResult, now: float) -> None:
        # One API failure slows every send down (30 s doubling to 600 s), not just retries of that pod.
        if result is not EvictionResult.ERROR:
            self._error_streak = 0
            self._hold_until = float("-inf")
            return
        self._error_streak += 1
        policy = self._policy
        delay = policy.retry_backoff_initial_seconds * 2 ** min(self._error_streak - 1, 16)
        self._hold_until = now + min(delay, policy.retry_backoff_max_seconds)

    async def _announce(self, request: EvictionRequest, result: EvictionResult, mode: Mode) -> None:
        reason, event_type = EVENT_REASONS[result]
        verb = {EvictionResult.EVICTED: "evicted", EvictionResult.DRY_RUN: "would evict (dry-run)"}.get(
            result, "eviction refused by a PodDisruptionBudget:"
        )
        message = f"gpu-watchdog {verb} {request.pod.key} (mode {mode.value}): {request.message}"[:1000]
        try:
            ok = await self._api.record_event(  # type: ignore[union-attr]
                request.pod,
                reason=reason,
                message=message,
                type=event_type,
                action="Evict",
                component=self._component,
                host=self._node,
            )
        except Exception as exc:
            log.warning("event for %s raised: %r", request.pod.key, exc)
            ok = False
        if not ok:
            self.event_failures += 1

    def _account(
        self,
        decision: Decision,
        result: EvictionResult,
        *,
        detail: str,
        now: float,
        mode: Mode,
        http_status: int | None = None,
        sent: bool = False,
    ) -> ActionOutcome | None:
        request = decision.request
        namespace = decision.namespace or (request.pod.namespace if request else "")
        reason = request.reason if request else decision.reason
        outcome = None
        if request is not None:
            outcome = ActionOutcome(request, result, mode, now, detail=detail, http_status=http_status)
        self._seen.add(decision.finding_key)
        standing = (decision.pod, result)
        if not sent and self._standing.get(decision.finding_key) == standing:
            return outcome  # the same refusal as last cycle: already counted and audited
        self._standing[decision.finding_key] = standing
        self._counts[(result.value, reason, namespace)] += 1
        final = decision if decision.result is result else _with_result(decision, result, detail)
        self._audit.write(audit_record(timestamp=now, node=self._node, mode=mode, decision=final, outcome=outcome))
        if result in (EvictionResult.EVICTED, EvictionResult.DRY_RUN, EvictionResult.BLOCKED_PDB, EvictionResult.ERROR):
            log.info("eviction %s %s/%s: %s", result.value, namespace, decision.pod, detail)
        return outcome


def _with_result(decision: Decision, result: EvictionResult, detail: str) -> Decision:
    return replace(decision, result=result, detail=detail)
