"""Builders shared by the action tests: pods, attributions and findings with only the fields a test cares about."""

from __future__ import annotations

from watchdog.model import Attribution, Finding, FindingKind, PodIndex, PodInfo, PodRef, Severity


def pod(name: str, *, ns: str = "team-a", priority: int = 0, **fields) -> PodInfo:
    return PodInfo(uid=f"uid-{ns}-{name}", namespace=ns, name=name, node="node-1", priority=priority, **fields)


def ref(info: PodInfo) -> PodRef:
    return PodRef(info.namespace, info.name, info.uid)


def attribution(*pods: PodInfo, healthy: bool = True) -> Attribution:
    return Attribution(index=PodIndex.of(pods), healthy=healthy)


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
