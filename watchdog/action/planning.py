"""The action stage without its actor: the policy the agent really applies, and decide + pace with no I/O.

Replay and scenario runs (watchdog.evaluation) must show the evictions the live agent would make, so they go through
these functions rather than their own copy of the rules: `effective_policy` is the one place the runtime overlay
(the agent's own namespace protected, the attribution tenant label) is applied — the service builds its policy with
it too — and `plan` is decide + pace with each would-be send fed back to the pacer, as the evictor does live.
PURE: no I/O, no asyncio.
"""

from __future__ import annotations

from typing import Collection, Iterable

from watchdog.action.decision import decide
from watchdog.action.pacing import Pacer
from watchdog.action.vm_rules import evacuates, is_launcher, launcher_vmi
from watchdog.config.action import ActionPolicy
from watchdog.config.runtime import resolve_action_policy
from watchdog.model import Attribution, Decision, EvictionRequest, EvictionResult, Finding, Mode


def effective_policy(
    action_policy: ActionPolicy, *, own_namespace: str | None, tenant_label: str | None
) -> ActionPolicy:
    """The policy as the agent applies it (the runtime overlay of ``watchdog.config.runtime``, without --mode)."""
    return resolve_action_policy(action_policy, own_namespace=own_namespace, tenant_label=tenant_label)


def would_be(mode: Mode) -> EvictionResult:
    """The result a request let through would get when nothing is sent: what its mode stands for, as if the API
    server accepted it (observe → observed, dry-run → dry_run, enforce → evicted)."""
    return {Mode.OBSERVE: EvictionResult.OBSERVED, Mode.DRY_RUN: EvictionResult.DRY_RUN}.get(
        mode, EvictionResult.EVICTED
    )


def decide_and_pace(
    findings: Iterable[Finding],
    attribution: Attribution,
    policy: ActionPolicy,
    now: float,
    *,
    pacer: Pacer,
    tick: int | None = None,
    in_flight: Collection[EvictionRequest] = (),
) -> list[Decision]:
    """The one decide → pace step, live (action.stage) and offline (`plan`) alike. `now` is the pacing clock
    (monotonic live, tick × tick length offline); `tick` the tick the findings were judged on."""
    findings = list(findings)
    decisions = decide(findings, attribution, policy=policy, now=now)
    return pacer.pace(decisions, now=now, findings=findings, attribution=attribution, tick=tick, in_flight=in_flight)


def plan(
    findings: Iterable[Finding],
    attribution: Attribution,
    policy: ActionPolicy,
    now: float,
    *,
    pacer: Pacer | None = None,
    tick: int | None = None,
) -> list[Decision]:
    """decide + pace, no I/O. Decisions left with result None would be sent; pass the same `pacer` across the
    cycles of a replay so cooldowns and the token bucket carry over (it records each would-be send)."""
    pacer = pacer or Pacer(policy)
    paced = decide_and_pace(findings, attribution, policy, now, pacer=pacer, tick=tick)
    for decision in paced:
        if decision.result is None and decision.request is not None:
            pacer.record(decision.request, would_be_for(decision, attribution, policy.mode), now=now)
    return paced


def would_be_for(decision: Decision, attribution: Attribution, mode: Mode) -> EvictionResult:
    """`would_be(mode)`, except that in enforce mode KubeVirt answers a launcher pod whose VMI it marks for
    evacuation with a 429 the evictor reads as `migrating` (vm_rules.py)."""
    result = would_be(mode)
    request = decision.request
    pod = attribution.pod(request.pod) if request is not None else None
    if result is EvictionResult.EVICTED and pod is not None and is_launcher(pod):
        vmi = launcher_vmi(pod, attribution.vmis)
        if vmi is not None and evacuates(vmi):
            return EvictionResult.MIGRATING
    return result
