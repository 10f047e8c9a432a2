"""The detection stage as one object: a tick in (sample + attribution), the findings that hold at that tick out.

Pure (no I/O, no asyncio, no logging): everything it knows between ticks is in numpy rings and small dicts, so the
service can call it inline, a recording replays to the same findings, and the evaluation can run it faster than
real time. A policy reload keeps what was learned where it still fits (baselines, windows, open runs); see
`set_policy`.
"""

from __future__ import annotations

from typing import Literal, Mapping

from watchdog.config.detection import DetectionPolicy
from watchdog.detection.domains import devices_of, domains_of
from watchdog.detection.interference import InterferenceDetector
from watchdog.detection.memory import MemoryPressureDetector
from watchdog.detection.quota import QuotaDetector
from watchdog.detection.unauthorized import UnauthorizedDetector
from watchdog.detection.xid import XidDetector
from watchdog.model import EMPTY, Attribution, Finding, NodeSample, PodRef

Change = Literal["new", "resolved", "updated"]


class Detector:
    """Stateful across ticks; call `step` once per tick with increasing ticks."""

    def __init__(self, policy: DetectionPolicy | None = None, *, tenant_label: str | None = None) -> None:
        self._policy = policy or DetectionPolicy()
        self._tenant_label = tenant_label
        self._attribution = Attribution()
        self._tenants: dict[str, str] = {}
        self._interference = InterferenceDetector(self._policy, tenant_of=self.tenant_of)
        self._memory = MemoryPressureDetector(self._policy, tenant_of=self.tenant_of)
        self._quota = QuotaDetector(self._policy, tenant_of=self.tenant_of)
        self._unauthorized = UnauthorizedDetector(self._policy, tenant_of=self.tenant_of)
        self._xid = XidDetector(self._policy.xid, tenant_of=self.tenant_of)
        self._last_tick: int | None = None

    @property
    def policy(self) -> DetectionPolicy:
        return self._policy

    def set_policy(self, policy: DetectionPolicy) -> None:
        """Hot reload: learned baselines, windows (resized, newest kept) and open runs survive."""
        self._policy = policy
        self._interference.set_policy(policy)
        self._memory.set_policy(policy)
        self._quota.set_policy(policy)
        self._unauthorized.set_policy(policy)
        self._xid.set_policy(policy.xid)

    def tenant_of(self, ref: PodRef) -> str:
        """The pod's tenant: the configured label's value when the pod has it, else its namespace."""
        tenant = self._tenants.get(ref.key)
        if tenant is None:
            info = self._attribution.pod(ref) if self._tenant_label else None
            tenant = info.tenant(self._tenant_label) if info is not None else ref.namespace
            self._tenants[ref.key] = tenant
        return tenant

    def step(
        self,
        sample: NodeSample,
        attribution: Attribution,
        *,
        external_signals: Mapping[str, float] | None = None,
    ) -> tuple[Finding, ...]:
        """The findings open at this tick, sorted by key. `external_signals`: "ns/pod" → override signal value."""
        if not isinstance(sample, NodeSample) or not isinstance(attribution, Attribution):
            raise TypeError("step() takes a NodeSample and an Attribution")
        if self._last_tick is not None and sample.tick <= self._last_tick:
            raise ValueError(f"tick {sample.tick} is not after the previous tick {self._last_tick}")
        self._last_tick = sample.tick
        self._attribution, self._tenants = attribution, {}
        devices = devices_of(sample, attribution)
        domains = domains_of(devices)
        when = {"tick": sample.tick, "timestamp": sample.timestamp}
        findings = [
            *self._interference.step(domains, attribution, external=external_signals or EMPTY, **when),
            *self._memory.step(devices, attribution, **when),
            *self._quota.step(devices, attribution, **when),
            *self._unauthorized.step(devices, attribution, **when),
            *self._xid.step(sample, devices, attribution),
        ]
        return tuple(sorted(findings, key=lambda finding: finding.key))


def _material(finding: Finding) -> tuple:
    """What makes a finding different enough to log again (evidence numbers move every tick and do not)."""
    return (
        finding.severity,
        finding.resource,
        finding.culprit.key if finding.culprit else None,
        tuple(sorted(ref.key for ref in finding.victims)),
        finding.tenant,
        finding.first_tick,
    )


def changes(previous: tuple[Finding, ...] | list[Finding], current: tuple[Finding, ...] | list[Finding]) -> list[
    tuple[Change, Finding]
]:
    """What changed between two ticks' findings, so the service logs once per change, not once per tick."""
    before = {finding.key: finding for finding in previous}
    after = {finding.key: finding for finding in current}
    result: list[tuple[Change, Finding]] = []
    for key, finding in after.items():
        old = before.get(key)
        if old is None:
            result.append(("new", finding))
        elif _material(old) != _material(finding):
            result.append(("updated", finding))
    result.extend(("resolved", finding) for key, finding in before.items() if key not in after)
    return result
