"""The one actor: the only code that sends an eviction, the only code that knows the mode.

Modelled on the descheduler's PodEvictor (pkg/descheduler/evictions/evictions.go): rules decide elsewhere, this
module sends a policy/v1 Eviction (so PodDisruptionBudgets hold), handles the answers, records a Kubernetes Event
and counts every result. Every decision it is handed ends with exactly one result, counted under
(result, reason, namespace) for gpu_watchdog_evictions_total and written as one audit line.

observe sends nothing; dry-run sends only dryRun=All (the PDB check still runs server-side, so the answer says
whether the eviction would be allowed — kubernetes-and-friends.md §1); enforce evicts. Right before each send the
kill switch is re-read (`SendGate.confirm`), so an operator's pause stops the very next request.
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
# Results worth an Event on the pod: real attempts, their refusals and their failures — not the pending/cooldown
# chatter of stopped decisions, which would be one Event per standing finding per change (docs/action.md).
EVENT_REASONS: Mapping[EvictionResult, tuple[str, str]] = {
    EvictionResult.EVICTED: ("GpuWatchdogEvicted", "Warning"),
    EvictionResult.DRY_RUN: ("GpuWatchdogDryRun", "Normal"),
    EvictionResult.BLOCKED_PDB: ("GpuWatchdogEvictionBlocked", "Warning"),
    EvictionResult.BLOCKED: ("GpuWatchdogEvictionBlocked", "Warning"),
    EvictionResult.ERROR: ("GpuWatchdogEvictionFailed", "Warning"),
}
_VERBS: Mapping[EvictionResult, str] = {
    EvictionResult.EVICTED: "evicted",
    EvictionResult.DRY_RUN: "would evict (dry-run)",
    EvictionResult.ERROR: "could not evict",
}


class EvictionReplyLike(Protocol):
    """What watchdog.kube.eviction.EvictionReply carries."""

    result: EvictionResult
    http_status: int | None
    message: str
    retry_after: float | None


class SendGate(Protocol):
    """watchdog.action.killswitch.KillSwitch as the evictor sees it."""

    @property
    def switched_on(self) -> bool: ...

    async def confirm(self) -> str | None: ...


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
        kill_switch: SendGate | None = None,
        component: str = COMPONENT,
    ) -> None:
        self._api = api
        self._policy = policy
        self._pacer = pacer
        self._audit = audit
        self._clock = clock
        self._node = node
        self._paused = paused
        # Callers that hand over `switch.paused` (a bound KillSwitch method) get the re-read before each send too.
        owner = getattr(paused, "__self__", None)
        if kill_switch is None and callable(getattr(owner, "confirm", None)) and hasattr(owner, "switched_on"):
            kill_switch = owner
        self._kill_switch = kill_switch
        self._component = component
        self._counts: Counter[tuple[str, str, str]] = Counter()
        self._error_streak = 0
        self._hold_until = float("-inf")
        self._hold_why = ""
        self.event_failures = 0
        # A standing finding is decided again every cycle; a refusal that merely repeats (pending, cooldown, …) is
        # counted and audited once per change, so counters and the audit log track decisions, not ticks. Keyed by
        # (finding, pod): one Xid drain decides about several pods of the same finding.
        self._standing: dict[tuple[str, str], EvictionResult] = {}
        self._last_attempt: dict[tuple[str, str], EvictionResult] = {}
        self._seen: set[tuple[str, str]] = set()

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
        self._last_attempt = {key: value for key, value in self._last_attempt.items() if key in self._seen}
        return outcomes

    async def _finish(self, decision: Decision) -> ActionOutcome | None:
        request = decision.request
        mode = self._policy.mode
        now = self._clock()
        if decision.result is not None or request is None:
            result = decision.result or EvictionResult.NO_CANDIDATE
            return self._account(decision, result, detail=decision.detail, now=now, mode=mode)
        if self._switched_on():
            return self._account(decision, EvictionResult.PAUSED, detail="kill switch is on", now=now, mode=mode)
        if now < self._hold_until:
            detail = f"holding off {self._hold_until - now:.0f}s after {self._hold_why}"
            return self._account(decision, EvictionResult.RATE_LIMITED, detail=detail, now=now, mode=mode)
        if mode is Mode.OBSERVE:
            self._pacer.record(request, EvictionResult.OBSERVED, now=now)
            detail = "observe mode: nothing sent"
            return self._account(decision, EvictionResult.OBSERVED, detail=detail, now=now, mode=mode, sent=True)
        if self._api is None:
            return self._account(decision, EvictionResult.ERROR, detail="no Kubernetes API", now=now, mode=mode)
        blocked = await self._confirm_switch()
        if blocked:
            return self._account(decision, EvictionResult.PAUSED, detail=blocked, now=self._clock(), mode=mode)
        result, status, detail, retry_after = await self._send(request, dry_run=mode is Mode.DRY_RUN)
        now = self._clock()
        self._pacer.record(request, result, now=now, retry_after=retry_after)
        self._note_errors(result, now, retry_after)
        outcome = self._account(decision, result, detail=detail, now=now, mode=mode, http_status=status, sent=True)
        key = (decision.finding_key, decision.pod)
        # A failure repeated attempt after attempt is one Event per streak, as a standing refusal is one count.
        repeated_error = result is EvictionResult.ERROR and self._last_attempt.get(key) is EvictionResult.ERROR
        self._last_attempt[key] = result
        if result in EVENT_REASONS and not repeated_error:
            await self._announce(request, result, mode, detail)
        return outcome

    def _switched_on(self) -> bool:
        """The pause as last known, without a read: for every decision, including observe mode's."""
        if self._kill_switch is not None:
            return self._kill_switch.switched_on
        return self._paused()

    async def _confirm_switch(self) -> str | None:
        """Right before a send: re-read the switch; an unknown or unreadable switch stops the send."""
        if self._kill_switch is None:
            return None
        try:
            return await self._kill_switch.confirm()
        except Exception as exc:  # the switch promises not to raise; if it does, nothing is sent
            log.warning("kill switch check raised: %r", exc)
            return f"kill switch unknown: check raised {type(exc).__name__}"

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

    def _note_errors(self, result: EvictionResult, now: float, retry_after: float | None) -> None:
        policy = self._policy
        if result is EvictionResult.RATE_LIMITED:
            # API Priority and Fairness throttled us (429 without a DisruptionBudget cause): the whole API server
            # asked us to wait, so every send waits, for Retry-After when it said so (kubernetes-and-friends.md §1).
            wait = retry_after if retry_after else policy.retry_backoff_initial_seconds
            self._hold_until = max(self._hold_until, now + wait)
            self._hold_why = "the API server throttled us (429)"
            return
        # One API failure slows every send down (30 s doubling to 600 s), not just retries of that pod.
        if result is not EvictionResult.ERROR:
            self._error_streak = 0
            self._hold_until = float("-inf")
            return
        self._error_streak += 1
        delay = policy.retry_backoff_initial_seconds * 2 ** min(self._error_streak - 1, 16)
        self._hold_until = now + min(delay, policy.retry_backoff_max_seconds)
        self._hold_why = f"{self._error_streak} API error(s)"

    async def _announce(self, request: EvictionRequest, result: EvictionResult, mode: Mode, detail: str) -> None:
        reason, event_type = EVENT_REASONS[result]
        verb = _VERBS.get(result, "eviction refused by a PodDisruptionBudget:")
        message = f"gpu-watchdog {verb} {request.pod.key} (mode {mode.value}): {request.message}"
        if result is EvictionResult.ERROR:
            message = f"gpu-watchdog {verb} {request.pod.key} (mode {mode.value}): {detail}; {request.message}"
        message = message[:1000]
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
        key = (decision.finding_key, decision.pod)
        self._seen.add(key)
        if not sent and self._standing.get(key) is result:
            return outcome  # the same refusal as last cycle: already counted and audited
        self._standing[key] = result
        self._counts[(result.value, reason, namespace)] += 1
        final = decision if decision.result is result else _with_result(decision, result, detail)
        self._audit.write(audit_record(timestamp=now, node=self._node, mode=mode, decision=final, outcome=outcome))
        if result in (EvictionResult.EVICTED, EvictionResult.DRY_RUN, EvictionResult.BLOCKED_PDB, EvictionResult.ERROR):
            log.info("eviction %s %s/%s: %s", result.value, namespace, decision.pod, detail)
        return outcome


def _with_result(decision: Decision, result: EvictionResult, detail: str) -> Decision:
    return replace(decision, result=result, detail=detail)
