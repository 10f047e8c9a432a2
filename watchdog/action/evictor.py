"""The one actor: the only code that sends an eviction, the only code that knows the mode.

Modelled on the descheduler's PodEvictor (pkg/descheduler/evictions/evictions.go): rules decide elsewhere, this
module sends a policy/v1 Eviction (so PodDisruptionBudgets hold), handles the answers, records a Kubernetes Event
and counts every result. Every decision it is handed ends with exactly one result, counted under
(result, reason, namespace) for gpu_watchdog_evictions_total and written as one audit line.

observe sends nothing; dry-run sends only dryRun=All (the PDB check still runs server-side, so the answer says
whether the eviction would be allowed — kubernetes pkg/registry/core/pod/storage/eviction.go, checkAndDecrement);
enforce evicts. Right before each send the
kill switch is re-read (`SendGate.confirm`), so an operator's pause stops the very next request, and then one slot
of the cluster-wide budget is taken (send_budget.py): a refused slot ends the decision as rate_limited.

A decision is older than its send: it was made on the pod cache (whose watch may have stalled for up to its idle
limit, 150 s) and before the awaits of the send itself (the kill-switch GET, the budget slot, the pod GET), during
which a policy reload may land. So, with `recheck_pods`, the pod is read once more just before the request, and
after the last await the CURRENT policy is applied again: observe mode sends nothing, a pod protected now
(annotation, namespace, priority floor), terminating, ended or replaced (another uid) is not sent for. A reload
never escalates a decision already in flight: dry-run at decision time stays dry-run. A virt-launcher pod's VMI is
read too (by the pod's kubevirt.io/domain annotation): the VMI list the decision was made on may be 30 s old, and
whether KubeVirt migrates or stops the VM (its strategy, LiveMigratable, a migration under way) is judged again on
the VMI as it is now (vm_rules.py); a VMI that cannot be read stops the send, one that is gone makes it `unsafe`.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable, Mapping, Protocol

from watchdog.action.audit import AuditLog
from watchdog.action.eligibility import Refusal, protection, refusal
from watchdog.action.ledger import Ledger
from watchdog.action.pacing import IN_FLIGHT, Pacer
from watchdog.action.send_budget import SendBudget, take_slot
from watchdog.action.vm_rules import is_launcher
from watchdog.config.action import ActionPolicy
from watchdog.model import (ActionOutcome, ActionReport, Decision, EvictionRequest, EvictionResult, Mode,
                            PodInfo, PodRef, VmiInfo)
from watchdog.model.vms import DOMAIN_ANNOTATION

log = logging.getLogger(__name__)

COMPONENT = "gpu-watchdog"
# Results worth an Event on the pod: real attempts, their refusals and their failures — not the pending/cooldown
# chatter of stopped decisions, which would be one Event per standing finding per change (docs/action.md).
EVENT_REASONS: Mapping[EvictionResult, tuple[str, str]] = {
    EvictionResult.EVICTED: ("GpuWatchdogEvicted", "Warning"),
    EvictionResult.DRY_RUN: ("GpuWatchdogDryRun", "Normal"),
    EvictionResult.MIGRATING: ("GpuWatchdogMigrationRequested", "Normal"),  # KubeVirt moves the VM, still running
    EvictionResult.BLOCKED_PDB: ("GpuWatchdogEvictionBlocked", "Warning"),
    EvictionResult.BLOCKED: ("GpuWatchdogEvictionBlocked", "Warning"),
    EvictionResult.ERROR: ("GpuWatchdogEvictionFailed", "Warning"),
}
_VERBS: Mapping[EvictionResult, str] = {
    EvictionResult.EVICTED: "evicted",
    EvictionResult.DRY_RUN: "would evict (dry-run)",
    EvictionResult.ERROR: "could not evict",
    EvictionResult.MIGRATING: "asked KubeVirt to live-migrate the VM of",
    EvictionResult.BLOCKED: "eviction refused for",
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
    """The slice of watchdog.kube.KubeEvictions the evictor needs; tests use an in-memory one. `get_pod` is only
    called with `recheck_pods` (it raises when the pod cannot be read, answers None when it does not exist)."""

    async def evict(self, pod: PodRef, *, dry_run: bool, grace_seconds: int | None = None) -> EvictionReplyLike: ...

    async def get_pod(self, namespace: str, name: str) -> PodInfo | None: ...

    async def get_vmi(self, namespace: str, name: str) -> VmiInfo | None: ...

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
        tenant: str | None = None,
        owner_kind: str | None = None,
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
        kill_switch: SendGate | None,
        recheck_pods: bool = False,
        component: str = COMPONENT,
        budget: SendBudget | None = None,
        monotonic: Callable[[], float] | None = None,
        controller: str | None = None,
    ) -> None:
        """`node`: the host named in Events, and on an agent the node of every audit line. `controller`: the
        controller replica's identity; its audit lines then name the alert's node as `node` and the replica as
        `controller`. `kill_switch`: the gate asked before every decision and re-read before every send; None means
        no switch is configured (never paused) and must be said explicitly. `recheck_pods`: GET each pod right before
        its request and decide again on what the API server has now (the agent, whose pods come from a watch cache).
        `budget`: the cluster-wide ceiling, one slot taken after the switch's re-read; None means no ceiling.
        `clock` stamps outcomes, audit lines and Events (wall time); `monotonic` runs every guarantee (the pacer,
        the API hold-off, the decision age); None: `clock` serves both (a simulated world has one clock)."""
        self._api = api
        self._policy = policy
        self._pacer = pacer
        self._audit = audit
        self._clock = clock
        self._monotonic = monotonic or clock
        self._node = node
        self._kill_switch = kill_switch
        self._budget = budget
        self._recheck_pods = recheck_pods
        self._component = component
        self._ledger = Ledger(audit=audit, node=node, controller=controller)
        self._error_streak = 0
        self._hold_until = float("-inf")
        self._hold_why = ""
        self.event_failures = 0

    @property
    def mode(self) -> Mode:
        return self._policy.mode

    @property
    def counts(self) -> Mapping[tuple[str, str, str], int]:
        """(result, reason, namespace) → how many decisions ended so; for gpu_watchdog_evictions_total."""
        return self._ledger.snapshot_counts()

    def set_policy(self, policy: ActionPolicy) -> None:
        self._policy = policy

    async def act(self, decisions: Iterable[Decision]) -> ActionReport:
        """Finish every decision with one result, sending inline: the outcomes of those that name a pod, and every
        result counted this call (what gpu_watchdog_evictions_total went up by, with the pod each was about).
        The agent does not call this in its loop: it settles each cycle at once and sends from a queue beside the
        tick (action/stage.py), so the tick never waits on the API server."""
        outcomes = []
        self._ledger.begin_cycle()
        decided_at = self._monotonic()
        for decision in decisions:
            if decision.result is None and decision.request is not None:
                outcome = await self._send_one(decision, decided_at=decided_at)
            else:
                outcome = self._settle_one(decision)
            if outcome is not None:
                outcomes.append(outcome)
        self._ledger.end_cycle()
        return ActionReport(outcomes=tuple(outcomes), counted=self._ledger.drain().counted)

    def settle(self, decisions: Iterable[Decision]) -> tuple[ActionReport, list[Decision]]:
        """One cycle's decisions, without I/O: every one that ends here gets its result (counted, audited); those
        that need the API server are handed back, to go to `send`. The report also carries every send finished
        since the previous call."""
        finished = self._ledger.drain()
        outcomes = list(finished.outcomes)
        self._ledger.begin_cycle()
        to_send: list[Decision] = []
        for decision in decisions:
            if decision.result is EvictionResult.COOLDOWN and decision.detail == IN_FLIGHT:
                self._ledger.see(decision)  # its send is queued: that send reports it
                continue
            if self._needs_send(decision):
                self._ledger.see(decision)
                to_send.append(decision)
                continue
            outcome = self._settle_one(decision)
            if outcome is not None:
                outcomes.append(outcome)
        self._ledger.end_cycle()
        counted = finished.counted + self._ledger.drain().counted
        return ActionReport(outcomes=tuple(outcomes), counted=counted), to_send

    def refuse(self, decision: Decision, result: EvictionResult, *, detail: str) -> ActionOutcome | None:
        """End a decision `settle` handed back for sending without sending it (the send queue is full)."""
        return self._ledger.account(decision, result, detail=detail, now=self._clock(), mode=self._policy.mode)

    def drained(self) -> ActionReport:
        """What was counted since the last `settle` (a `refuse` after it)."""
        return self._ledger.drain()

    def _needs_send(self, decision: Decision) -> bool:
        """A request pacing let through, in a mode that talks to the API server, while nothing stops it now."""
        if decision.result is not None or decision.request is None:
            return False
        if self._switched_on() or self._monotonic() < self._hold_until or self._policy.mode is Mode.OBSERVE:
            return False
        return self._api is not None

    def _settle_one(self, decision: Decision) -> ActionOutcome | None:
        request = decision.request
        mode = self._policy.mode
        now = self._clock()
        if decision.result is not None or request is None:
            result = decision.result or EvictionResult.NO_CANDIDATE
            return self._ledger.account(decision, result, detail=decision.detail, now=now, mode=mode)
        if self._switched_on():
            return self._ledger.account(decision, EvictionResult.PAUSED, detail="kill switch is on", now=now, mode=mode)
        if self._monotonic() < self._hold_until:
            detail = f"holding off {self._hold_until - self._monotonic():.0f}s after {self._hold_why}"
            return self._ledger.account(decision, EvictionResult.RATE_LIMITED, detail=detail, now=now, mode=mode)
        if mode is Mode.OBSERVE:
            self._pacer.record(request, EvictionResult.OBSERVED, now=self._monotonic())
            detail = "observe mode: nothing sent"
            return self._ledger.account(decision, EvictionResult.OBSERVED, detail=detail, now=now, mode=mode, sent=True)
        return self._ledger.account(decision, EvictionResult.ERROR, detail="no Kubernetes API", now=now, mode=mode)

    async def send(self, decision: Decision, *, decided_at: float) -> ActionOutcome | None:
        """Send one request `settle` handed back; `decided_at`: the pacing (monotonic) time of the tick it was
        decided on. Too old a decision (`max_decision_age_seconds`) is dropped as stale, checked first and again
        after the last await before the POST."""
        outcome = await self._send_one(decision, decided_at=decided_at)
        self._ledger.sent(outcome)
        return outcome

    async def _send_one(self, decision: Decision, *, decided_at: float) -> ActionOutcome | None:
        request = decision.request
        assert request is not None
        mode = self._policy.mode
        stale = self._stale(decision, decided_at, mode=mode)
        if stale is not None or not self._needs_send(decision):
            return stale if stale is not None else self._settle_one(decision)
        blocked = await self._confirm_switch()
        if blocked:
            return self._ledger.account(decision, EvictionResult.PAUSED, detail=blocked, now=self._clock(), mode=mode)
        spent = await take_slot(self._budget, request.pod.key)  # taken before the re-read: never given back
        if spent:
            self._pacer.hold(request, now=self._monotonic())  # not one budget GET per cycle for a standing decision
            return self._ledger.account(decision, EvictionResult.RATE_LIMITED, detail=spent, now=self._clock(),
                                        mode=mode)
        fresh: PodInfo | None = None
        vms: Mapping[str, VmiInfo] | None = None
        if self._recheck_pods:
            fresh, failure = await self._reread(request)
            if failure is None and fresh is not None and is_launcher(fresh):
                vms, failure = await self._reread_vmi(fresh)
            if failure is not None:
                return self._failed_reread(decision, failure, mode=mode)
        # No await from here to the POST: what is checked now is what the request goes out under.
        stopped = (self._stale(decision, decided_at, mode=mode)
                   or self._stopped_since_decided(decision, fresh, mode=mode, vms=vms))
        if stopped is not None:
            return stopped
        dry_run = mode is Mode.DRY_RUN or self._policy.mode is Mode.DRY_RUN
        mode = Mode.DRY_RUN if dry_run else Mode.ENFORCE
        result, status, detail, retry_after = await self._send(request, dry_run=dry_run)
        self._pacer.record(request, result, now=self._monotonic(), retry_after=retry_after)
        self._note_errors(result, self._monotonic(), retry_after)
        outcome = self._ledger.account(decision, result, detail=detail, now=self._clock(), mode=mode,
                                       http_status=status, sent=True)
        key = (decision.finding_key, decision.pod)
        # A failure repeated attempt after attempt is one Event per streak, as a standing refusal is one count.
        repeated_error = result is EvictionResult.ERROR and self._ledger.last_attempt.get(key) is EvictionResult.ERROR
        self._ledger.last_attempt[key] = result
        if result in EVENT_REASONS and not repeated_error:
            await self._announce(request, result, mode, detail)
        return outcome

    def _stale(self, decision: Decision, decided_at: float, *, mode: Mode) -> ActionOutcome | None:
        age = self._monotonic() - decided_at
        limit = self._policy.max_decision_age_seconds
        if age <= limit:
            return None
        detail = f"decided {age:.1f}s ago, over max_decision_age_seconds ({limit:g}s): not sent on an old reading"
        return self._ledger.account(decision, EvictionResult.STALE, detail=detail, now=self._clock(), mode=mode,
                                    sent=True)

    def _switched_on(self) -> bool:
        """The pause as last known, without a read: for every decision, including observe mode's."""
        return self._kill_switch is not None and self._kill_switch.switched_on

    async def _reread(self, request: EvictionRequest) -> tuple[PodInfo | None, str | None]:
        """The pod as the API server has it now (None: it no longer exists), or why it could not be read."""
        assert self._api is not None
        try:
            return await self._api.get_pod(request.pod.namespace, request.pod.name), None
        except Exception as exc:  # the client raises KubeError; anything else is a failure too, never a crash
            log.warning("re-reading %s before sending raised: %r", request.pod.key, exc)
            return None, f"could not re-read the pod before sending: {exc}"

    async def _reread_vmi(self, pod: PodInfo) -> tuple[Mapping[str, VmiInfo], str | None]:
        """The launcher pod's VMI as the API server has it now, by uid as the VM rules look it up ({}: the pod names
        none, or it is gone; the rules then refuse as `unsafe`), or why it could not be read."""
        assert self._api is not None
        name = pod.annotations.get(DOMAIN_ANNOTATION)
        if not name:
            return {}, None
        try:
            vmi = await self._api.get_vmi(pod.namespace, name)
        except Exception as exc:  # KubeError, a malformed VMI (ValueError), anything: nothing is sent
            log.warning("re-reading VMI %s/%s before sending raised: %r", pod.namespace, name, exc)
            return {}, f"could not re-read VMI {pod.namespace}/{name} before sending: {exc}"
        return ({vmi.uid: vmi} if vmi is not None else {}), None

    def _failed_reread(self, decision: Decision, failure: str, *, mode: Mode) -> ActionOutcome | None:
        """A pod that cannot be read is not sent for; it is an API error, backed off like a failed eviction."""
        assert decision.request is not None
        self._pacer.record(decision.request, EvictionResult.ERROR, now=self._monotonic())
        self._note_errors(EvictionResult.ERROR, self._monotonic(), None)
        return self._ledger.account(decision, EvictionResult.ERROR, detail=failure, now=self._clock(), mode=mode)

    def _stopped_since_decided(self, decision: Decision, fresh: PodInfo | None, *, mode: Mode,
                               vms: Mapping[str, VmiInfo] | None = None) -> ActionOutcome | None:
        """The outcome when the policy as it is now, or the pod (and a launcher's VMI, `vms`) as re-read, no longer
        allows the send; else None."""
        request = decision.request
        assert request is not None
        policy = self._policy
        now, pacing_now = self._clock(), self._monotonic()
        if policy.mode is Mode.OBSERVE:
            self._pacer.record(request, EvictionResult.OBSERVED, now=pacing_now)
            detail = "observe mode (policy reloaded before the send): nothing sent"
            return self._ledger.account(decision, EvictionResult.OBSERVED, detail=detail, now=now, mode=Mode.OBSERVE,
                                 sent=True)
        refused = _request_refusal(request, policy)
        if self._recheck_pods:
            if fresh is None or (request.pod.uid and fresh.uid != request.pod.uid):
                what = "no longer exists" if fresh is None else f"was replaced (uid {fresh.uid})"
                self._pacer.record(request, EvictionResult.GONE, now=pacing_now)
                detail = f"re-read before sending: {request.pod.key} {what}"
                return self._ledger.account(decision, EvictionResult.GONE, detail=detail, now=now, mode=mode)
            self._pacer.learn(fresh)
            refused = refusal(fresh, policy, vms=vms) or refused
        if refused is None:
            return None
        self._pacer.hold(request, now=pacing_now)  # its stale decision comes back next cycle: not one GET per cycle
        detail = f"re-checked before sending: {refused.detail}"
        return self._ledger.account(decision, refused.result, detail=detail, now=now, mode=mode)

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
            # asked us to wait, so every send waits, for Retry-After when it said so (kubernetes
            # staging/src/k8s.io/apiserver/pkg/server/filters/priority-and-fairness.go).
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
        if result in (EvictionResult.ERROR, EvictionResult.MIGRATING, EvictionResult.BLOCKED):
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
                tenant=self._pacer.tenant(request.pod.key) or request.pod.namespace,
                owner_kind=self._pacer.owner_kind(request.pod.key),
            )
        except Exception as exc:
            log.warning("event for %s raised: %r", request.pod.key, exc)
            ok = False
        if not ok:
            self.event_failures += 1

def _request_refusal(request: EvictionRequest, policy: ActionPolicy) -> Refusal | None:
    """What the current policy refuses from the request alone (its namespace and priority), with no pod re-read."""
    stand_in = PodInfo(uid=request.pod.uid, namespace=request.pod.namespace, name=request.pod.name,
                       priority=request.priority)
    protected = protection(stand_in, policy)
    return Refusal(EvictionResult.PROTECTED, protected) if protected else None
