"""Which pod, if any, each finding would have us evict — and, when none, exactly why not.

This is the descheduler's split (plugins decide, one PodEvictor acts): these rules never touch the API, never know
the mode, never pace. PURE: no I/O, no asyncio; table-tested. Every path prefers "do nothing, and say why" over a
wrong eviction: a finding without a pod, an unhealthy attribution or a victim we cannot see is UNSAFE, never a guess.

Victim choice follows the kubelet's node-pressure ranking for memory (kubernetes/website, node-pressure-eviction.md:
usage above requests first, then priority, then usage above request) and, elsewhere, lowest priority, then largest
use of the contended resource, then youngest.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Mapping, Sequence

from watchdog.action.eligibility import Refusal, refusal
from watchdog.config.action import ActionPolicy
from watchdog.model import (
    EMPTY,
    Attribution,
    Decision,
    EvictionRequest,
    EvictionResult,
    Finding,
    FindingKind,
    REPORT_ONLY_KINDS,
    PodInfo,
    PodRef,
    Severity,
    VmiInfo,
)


def decide(
    findings: Iterable[Finding], attribution: Attribution, *, policy: ActionPolicy, now: float
) -> list[Decision]:
    """One or more decisions per finding (more only for an Xid drain), none for a report-only kind (never an
    eviction reason, so nothing to count or audit); `now` is kept for replayable signatures."""
    del now  # the rules are timeless; persistence and cooldowns are pacing's job
    decisions: list[Decision] = []
    for finding in findings:
        if finding.kind in REPORT_ONLY_KINDS:
            continue
        decisions.extend(_decide_one(finding, attribution, policy))
    return decisions


def _decide_one(finding: Finding, attribution: Attribution, policy: ActionPolicy) -> list[Decision]:
    kind_policy = policy.for_kind(finding.kind)
    if not kind_policy.enabled:
        what = "report only" if finding.kind is FindingKind.XID else "disabled"
        return [_stop(finding, EvictionResult.NO_CANDIDATE, f"{finding.kind.value} findings are {what} by policy")]
    if finding.severity is not Severity.CRITICAL:
        # Detection marks what is only worth reporting (a MIG instance filling up, an application Xid) below
        # critical; those never lead to an eviction.
        return [_stop(finding, EvictionResult.NO_CANDIDATE, f"{finding.severity.value} finding: report only")]
    if not finding.observed:
        # Detection keeps a finding open through missing data, but its evidence is old: never act on it.
        return [_stop(finding, EvictionResult.UNSAFE, f"not observed since tick {finding.last_tick}: never act blind")]
    if not attribution.healthy:
        return [_stop(finding, EvictionResult.UNSAFE, "attribution is unhealthy this tick: never act blind")]
    if finding.kind is FindingKind.INTERFERENCE:
        return [_interference(finding, attribution, policy)]
    if finding.kind is FindingKind.MEMORY_PRESSURE:
        return [_memory_pressure(finding, attribution, policy)]
    if finding.kind is FindingKind.QUOTA:
        return [_quota(finding, attribution, policy)]
    if finding.kind is FindingKind.UNAUTHORIZED:
        return [_unauthorized(finding, attribution, policy)]
    return _xid_drain(finding, attribution, policy)


# ----------------------------------------------------------------------------------------------- per kind


def _interference(finding: Finding, attribution: Attribution, policy: ActionPolicy) -> Decision:
    """The culprit, or a co-driver of the same contention in relief order; each protects only the victims it is
    strictly lower than, so a victim that is not above it (a batch pod whose clock fell too) never vetoes the relief
    of those that are. Co-drivers only reorder a relief the culprit itself would bring: when the culprit may not go
    (protected, or above every victim: a high-priority pod's own ramp capped the GPU), nobody goes, and a steady
    neighbour is never evicted for a change it did not make."""
    if finding.culprit is None:
        return _stop(finding, EvictionResult.UNSAFE, "finding names no culprit pod")
    culprit = attribution.pod(finding.culprit)
    if culprit is None:
        return _stop(finding, EvictionResult.UNSAFE, f"culprit {finding.culprit.key} is not in the pod cache")
    if not culprit.live:
        # Terminating or ended: what it drove is about to be freed; evicting anybody else now could over-evict.
        return _refused(finding, culprit, refusal(culprit, policy, vms=attribution.vmis)
                        or Refusal(EvictionResult.GONE, "not live"))
    victims, missing = _victims(finding, attribution)
    if missing:
        return _stop(finding, EvictionResult.UNSAFE, f"victim {missing.key} is not in the pod cache", culprit)
    live = [v for v in victims if v.live]
    if not live:
        return _stop(finding, EvictionResult.NO_CANDIDATE, "no live victim left to protect", culprit)
    drivers = _drivers(finding, culprit, victims)
    terminating = next((p for p in drivers if p.deleting), None)
    if terminating is not None:
        detail = f"{terminating.namespace}/{terminating.name}, a driver of this contention, is terminating"
        return _stop(finding, EvictionResult.ALREADY_EVICTED, detail, terminating)
    refused = refusal(culprit, policy, vms=attribution.vmis)
    if refused:
        return _refused(finding, culprit, refused, protects=_above(live, culprit))
    if not _above(live, culprit):
        v = max(live, key=lambda p: p.priority)  # the victim that binds: the one closest to being protected
        detail = f"culprit priority {culprit.priority} is not lower than victim {v.namespace}/{v.name}'s {v.priority}"
        return _stop(finding, EvictionResult.NOT_LOWER_PRIORITY, detail, culprit)
    for pod in drivers:  # the culprit is among them and may go: one of them does
        protects = _above(live, pod)
        if pod.uid == culprit.uid or (protects and refusal(pod, policy, vms=attribution.vmis) is None):
            return _go(finding, pod, protects=protects, co_driver_of=None if pod.uid == culprit.uid else culprit)
    raise AssertionError("unreachable: the culprit is a driver")


def _above(victims: Sequence[PodInfo], pod: PodInfo) -> list[PodInfo]:
    """The victims an eviction of `pod` protects: exactly those strictly above it in priority."""
    return [v for v in victims if v.uid != pod.uid and v.priority > pod.priority]


# A victim of the same finding drives the contention with the culprit when it is not above the culprit in priority
# and uses at least this share of what the culprit uses of the contended resource (the finding's `usage`: on a power
# domain, activity × the instance's share of the GPU). Two batch pods that cap a GPU only together each draw a
# comparable part; a small pod whose clock merely fell with everybody else's does not, and is never a candidate.
CO_DRIVER_USE_SHARE = 0.5


def _drivers(finding: Finding, culprit: PodInfo, victims: Sequence[PodInfo]) -> list[PodInfo]:
    """The culprit and its co-drivers, in relief order: lowest priority first (the kubelet's order among pods that
    use the starved resource, pkg/kubelet/eviction/helpers.go), then larger use, the culprit first among equals."""
    least = CO_DRIVER_USE_SHARE * _use(finding, culprit)
    co = [v for v in victims if v.uid != culprit.uid and v.priority <= culprit.priority and least > 0
          and _use(finding, v) >= least]
    return sorted([culprit, *co], key=lambda p: (p.priority, p.uid != culprit.uid, -_use(finding, p), -p.created))


def _memory_pressure(finding: Finding, attribution: Attribution, policy: ActionPolicy) -> Decision:
    victims, missing = _victims(finding, attribution)
    if missing:
        return _stop(finding, EvictionResult.UNSAFE, f"victim {missing.key} is not in the pod cache")
    victim_uids = {v.uid for v in victims}
    candidates = [pod for pod in _pods_by_key(finding.usage, attribution) if pod.uid not in victim_uids]

    candidates.sort(key=lambda p: (*relief_rank(_use(finding, p), p), -p.created))

    def protected_by(pod: PodInfo) -> list[PodInfo]:
        others = victims or [p for p in candidates if p.uid != pod.uid]
        return [p for p in others if p.live and p.uid != pod.uid]

    return _first_fit(finding, candidates, policy, protected_by=protected_by, compare_priority=True,
                      vms=attribution.vmis)


def _quota(finding: Finding, attribution: Attribution, policy: ActionPolicy) -> Decision:
    # Tenants as the tick's pod index counts them (the tenant label of the policy in force), as detection did.
    index = attribution.index
    tenant = finding.tenant
    if tenant is None and finding.culprit is not None:
        culprit = attribution.pod(finding.culprit)
        tenant = index.tenant(culprit) if culprit else None
    if tenant is None:
        return _stop(finding, EvictionResult.UNSAFE, "quota finding names no tenant and no known culprit")
    candidates = [pod for pod in attribution.pods.values() if index.tenant(pod) == tenant]
    if candidates and not finding.usage:
        # Without per-pod use every pod of the tenant would look alike, a CPU-only one included: never guess.
        return _stop(finding, EvictionResult.UNSAFE, f"quota finding for tenant {tenant} names no pod's use")
    candidates.sort(key=lambda p: (p.priority, -_use(finding, p), -p.created))
    protects = [v for v in (attribution.pod(ref) for ref in finding.victims) if v is not None and v.live]
    return _first_fit(
        finding, candidates, policy, protected_by=lambda pod: protects, compare_priority=False, tenant=tenant,
        vms=attribution.vmis,
    )


def _unauthorized(finding: Finding, attribution: Attribution, policy: ActionPolicy) -> Decision:
    culprit = _culprit(finding, attribution, policy)
    if isinstance(culprit, Decision):
        return culprit
    owners = [v for v in (attribution.pod(ref) for ref in finding.victims) if v is not None and v.live]
    return _go(finding, culprit, protects=owners)


def _xid_drain(finding: Finding, attribution: Attribution, policy: ActionPolicy) -> list[Decision]:
    targets = ([finding.culprit] if finding.culprit else []) + (list(finding.victims) if policy.xid.drain_all else [])
    if not targets:
        return [_stop(finding, EvictionResult.UNSAFE, "Xid is not attributed to any pod: nothing safe to drain")]
    decisions = []
    for ref in dict.fromkeys(targets):
        pod = attribution.pod(ref)
        if pod is None:
            decisions.append(_stop(finding, EvictionResult.UNSAFE, f"pod {ref.key} is not in the pod cache"))
            continue
        refused = refusal(pod, policy, vms=attribution.vmis)
        decisions.append(_refused(finding, pod, refused) if refused else _go(finding, pod, protects=()))
    return decisions


# ------------------------------------------------------------------------------------------------ helpers


def _first_fit(
    finding: Finding,
    ranked: Sequence[PodInfo],
    policy: ActionPolicy,
    *,
    protected_by,
    compare_priority: bool,
    tenant: str | None = None,
    vms: Mapping[str, VmiInfo] = EMPTY,
) -> Decision:
    """The first ranked pod that may go and frees enough; else the most telling reason why none may."""
    if not ranked:
        where = f"tenant {tenant}" if tenant else finding.domain
        return _stop(finding, EvictionResult.NO_CANDIDATE, f"no pod of {where} to choose from")
    first_blocker: Decision | None = None
    for pod in ranked:
        use = _use(finding, pod)
        # A pod that uses none of the contended resource frees nothing, whatever `needed` says (0 included).
        frees_enough = use > 0 and (finding.needed is None or use >= finding.needed)
        if pod.deleting and frees_enough:
            # Its resources are about to be freed: evicting another pod now could over-evict.
            return _stop(finding, EvictionResult.ALREADY_EVICTED, f"{pod.namespace}/{pod.name} is terminating", pod)
        if not frees_enough:
            continue
        refused = refusal(pod, policy, vms=vms)
        protects = protected_by(pod)
        if refused and refused.result is EvictionResult.VM_MIGRATING:
            # Its VM is moving away, which frees what it uses: as with a terminating pod, evict nobody else now.
            return _refused(finding, pod, refused, protects=protects)
        if refused:
            first_blocker = first_blocker or _refused(finding, pod, refused, protects=protects)
            continue
        higher = [p for p in protects if p.priority < pod.priority] if compare_priority else []
        if higher:
            detail = f"priority {pod.priority} is higher than protected {higher[0].namespace}/{higher[0].name}'s"
            detail += f" {higher[0].priority}"
            first_blocker = first_blocker or _stop(
                finding, EvictionResult.NOT_LOWER_PRIORITY, detail, pod, protects=protects
            )
            continue
        return _go(finding, pod, protects=protects)
    if first_blocker:
        return first_blocker
    if finding.needed is None:
        return _stop(finding, EvictionResult.NOT_ENOUGH, f"no candidate uses any {finding.resource}")
    return _stop(finding, EvictionResult.NOT_ENOUGH, f"no single pod frees the {finding.needed} needed")


def _culprit(finding: Finding, attribution: Attribution, policy: ActionPolicy) -> PodInfo | Decision:
    """The culprit's pod info, or the decision that stops here (no culprit, unknown, or refused)."""
    if finding.culprit is None:
        return _stop(finding, EvictionResult.UNSAFE, "finding names no culprit pod")
    pod = attribution.pod(finding.culprit)
    if pod is None:
        return _stop(finding, EvictionResult.UNSAFE, f"culprit {finding.culprit.key} is not in the pod cache")
    refused = refusal(pod, policy, vms=attribution.vmis)
    return _refused(finding, pod, refused) if refused else pod


def _victims(finding: Finding, attribution: Attribution) -> tuple[list[PodInfo], PodRef | None]:
    found = []
    for ref in finding.victims:
        pod = attribution.pod(ref)
        if pod is None:
            return [], ref
        found.append(pod)
    return found, None


def relief_rank(use: float, pod: PodInfo) -> tuple[bool, int, float]:
    """The kubelet's memory-pressure ranking key (pkg/kubelet/eviction/helpers.go rankMemoryPressure: exceedMemory
    Requests, then priority, then memory use above request); smaller goes first. A pod without a request counts as
    requesting 0. watchdog.detection.memory.relief_order orders the same way (stages may not import each other, so
    the rule is mirrored there and a test keeps both in step)."""
    excess = use - (pod.gpu_memory_request_bytes or 0)
    return (not excess > 0, pod.priority, -excess)


def _pods_by_key(usage, attribution: Attribution) -> list[PodInfo]:
    """The pods named by the finding's "namespace/name" usage keys, in its order; unknown ones left out."""
    found = (attribution.index.by_name(*key.split("/", 1)) for key in usage if "/" in key)
    return [pod for pod in found if pod is not None]


def _use(finding: Finding, pod: PodInfo) -> float:
    return float(finding.usage.get(f"{pod.namespace}/{pod.name}", 0.0))


def _request(finding: Finding, pod: PodInfo, protects: Sequence[PodInfo]) -> EvictionRequest:
    evidence = dict(finding.evidence)
    if finding.usage:
        evidence["use"] = _use(finding, pod)
    if finding.needed is not None:
        evidence["needed"] = finding.needed
    pod_ref = PodRef(pod.namespace, pod.name, pod.uid)
    relieves = ", ".join(f"{p.namespace}/{p.name} (priority {p.priority})" for p in protects)
    message = finding.message or f"{finding.kind.value} on {finding.domain} ({finding.resource})"
    message += f"; evicting {pod_ref.key} (priority {pod.priority})" + (f" relieves {relieves}" if relieves else "")
    return EvictionRequest(
        pod=pod_ref,
        priority=pod.priority,
        finding_key=finding.key,
        finding_kind=finding.kind,
        reason=finding.kind.value,
        protects=tuple((PodRef(p.namespace, p.name, p.uid), p.priority) for p in protects),
        evidence=evidence,
        message=message,
    )


def _go(
    finding: Finding, pod: PodInfo, *, protects: Sequence[PodInfo], co_driver_of: PodInfo | None = None
) -> Decision:
    request = _request(finding, pod, protects)
    if co_driver_of is not None:  # say why the pod that goes is not the one the finding names
        note = (f"; it drives the contention with {co_driver_of.namespace}/{co_driver_of.name} (priority "
                f"{co_driver_of.priority}) and goes first: lowest priority first")
        request = replace(request, message=request.message + note)
    return Decision(
        finding_key=finding.key,
        finding_kind=finding.kind,
        request=request,
        result=None,
        reason=finding.kind.value,
        namespace=pod.namespace,
        pod=pod.name,
    )


def _refused(finding: Finding, pod: PodInfo, refused: Refusal, *, protects: Sequence[PodInfo] = ()) -> Decision:
    return _stop(finding, refused.result, refused.detail, pod, protects=protects)


def _stop(
    finding: Finding,
    result: EvictionResult,
    detail: str,
    pod: PodInfo | None = None,
    *,
    protects: Sequence[PodInfo] = (),
) -> Decision:
    """A decision that ends here; it still names the pod (with a request) when one was identified, for the audit."""
    return Decision(
        finding_key=finding.key,
        finding_kind=finding.kind,
        request=_request(finding, pod, protects) if pod else None,
        result=result,
        reason=finding.kind.value,
        namespace=pod.namespace if pod else (finding.culprit.namespace if finding.culprit else ""),
        pod=pod.name if pod else (finding.culprit.name if finding.culprit else ""),
        detail=detail,
    )
