"""Builders shared by the action tests: pods, attributions and findings with only the fields a test cares about, and
an action stage on the test bed's clock."""

from __future__ import annotations

from watchdog.action import ActionStage
from watchdog.config.action import ActionPolicy
from watchdog.model import Attribution, Finding, FindingKind, PodIndex, PodInfo, PodRef, Severity
from watchdog.testbed import SimClock


def pod(name: str, *, ns: str = "team-a", priority: int = 0, **fields) -> PodInfo:
    return PodInfo(uid=f"uid-{ns}-{name}", namespace=ns, name=name, node="node-1", priority=priority, **fields)


def ref(info: PodInfo) -> PodRef:
    return PodRef(info.namespace, info.name, info.uid)


def attribution(*pods: PodInfo, healthy: bool = True, tenant_label: str | None = None) -> Attribution:
    """The pods as one tick's attribution; ``tenant_label`` is the label the tick's pod index counts tenants by
    (what the live agent builds from the policy in force), the one place the action stage reads tenants from."""
    return Attribution(index=PodIndex.of(pods, tenant_label=tenant_label), healthy=healthy)


def finding(
    kind: FindingKind = FindingKind.INTERFERENCE,
    *,
    key: str | None = None,
    culprit: PodInfo | PodRef | None = None,
    victims: tuple = (),
    usage: dict | None = None,
    needed: float | None = None,
    tenant: str | None = None,
    since: float = 0.0,
    severity: Severity = Severity.CRITICAL,
) -> Finding:
    as_ref = lambda p: ref(p) if isinstance(p, PodInfo) else p  # noqa: E731
    return Finding(
        kind=kind,
        key=key or f"{kind.value}/gpu-0",
        domain="gpu/GPU-0/power",
        resource="memory" if kind is FindingKind.MEMORY_PRESSURE else "power",
        severity=severity,
        first_tick=1,
        last_tick=10,
        since=since,
        victims=tuple(as_ref(v) for v in victims),
        culprit=as_ref(culprit) if culprit is not None else None,
        tenant=tenant,
        evidence={"power_watts": 690.0},
        usage=usage or {},
        needed=needed,
    )


def warmed_stage(policy: ActionPolicy, *, now: float | None = None, warm_up: float | None = None,
                 clock: SimClock | None = None, **stage_args) -> tuple[ActionStage, SimClock]:
    """An ActionStage whose agent started ``warm_up`` seconds before ``now`` (by default long enough for its token
    bucket, empty at process start, to have filled), and its clock, reading ``now`` on return.

    ``clock``: a SimClock the test shares with other parts (a kill switch, a second agent), not yet past the agent's
    start; without ``now`` the agent starts at its current reading. Without ``clock``, a new one.
    """
    if warm_up is None:
        warm_up = 2 * policy.node_eviction_burst * 60.0 / policy.node_evictions_per_minute  # full, float error or not
    if clock is None:
        if now is None:
            raise ValueError("warmed_stage: give now, clock or both")
        clock = SimClock(now - warm_up)
    elif now is None:
        now = clock.now() + warm_up
    clock.set(now - warm_up)
    stage = ActionStage(policy, clock=clock, **stage_args)
    clock.set(now)
    return stage, clock
