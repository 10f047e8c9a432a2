"""The detection stage as one object: a tick in (sample + attribution), the findings that hold at that tick out.

Pure (no I/O, no asyncio, no logging): everything it knows between ticks is in numpy rings and small dicts, so the
service can call it inline, a recording replays to the same findings, and the evaluation can run it faster than
real time. A policy reload keeps what was learned where it still fits (baselines, windows, open runs); see
`set_policy`.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from watchdog.config.detection import DetectionPolicy
from watchdog.config.runtime import RuntimePolicy
from watchdog.detection.borrowed import with_borrowed
from watchdog.detection.domains import devices_of, domains_of
from watchdog.detection.interference import InterferenceDetector
from watchdog.detection.memory import MemoryPressureDetector
from watchdog.detection.pools import memory_pools
from watchdog.detection.quota import QuotaDetector
from watchdog.detection.unauthorized import UnauthorizedDetector
from watchdog.detection.xid import XidDetector
from watchdog.model import EMPTY, Attribution, Finding, FindingKind, InstanceActivity, NodeSample, PodRef


class Detector:
    """Stateful across ticks; call `step` once per tick with increasing ticks."""

    def __init__(self, policy: DetectionPolicy | None = None) -> None:
        """A tenant is what the tick's pod index says (``Attribution.index.tenant_of``); the service builds that
        index for the runtime policy's tenant label, so detection needs no label of its own."""
        self._policy = policy or DetectionPolicy()
        self._attribution = Attribution()
        self._interference = InterferenceDetector(self._policy, tenant_of=self._tenant_of)
        self._memory = MemoryPressureDetector(self._policy, tenant_of=self._tenant_of)
        self._quota = QuotaDetector(self._policy, tenant_of=self._tenant_of)
        self._unauthorized = UnauthorizedDetector(self._policy, tenant_of=self._tenant_of)
        self._xid = XidDetector(self._policy.xid, tenant_of=self._tenant_of)
        self._last_tick: int | None = None

    @property
    def policy(self) -> DetectionPolicy:
        return self._policy

    def apply_runtime(self, runtime: RuntimePolicy) -> None:
        """A policy load: its thresholds, learned state kept (see ``set_policy``). Its tenant label reaches
        detection through the pod index the cycle builds with it."""
        self.set_policy(runtime.detection)

    def set_policy(self, policy: DetectionPolicy) -> None:
        """Hot reload: learned baselines, windows (resized, newest kept) and open runs survive."""
        self._policy = policy
        self._interference.set_policy(policy)
        self._memory.set_policy(policy)
        self._quota.set_policy(policy)
        self._unauthorized.set_policy(policy)
        self._xid.set_policy(policy.xid)

    def _tenant_of(self, ref: PodRef) -> str:
        # The sub-detectors live across ticks; the tenant rule is the current tick's index's.
        return self._attribution.index.tenant_of(ref)

    def step(
        self,
        sample: NodeSample,
        attribution: Attribution,
        *,
        external_signals: Mapping[str, float] | None = None,
        borrowed_activity: Mapping[str, InstanceActivity] | None = None,
    ) -> tuple[Finding, ...]:
        """The findings open at this tick, sorted by key. `external_signals`: "ns/pod" → override signal value;
        `borrowed_activity`: "<GPU UUID>/<GI id>" → the instance's activity from outside NVML, used only where
        NVML has none (detection/borrowed.py)."""
        if not isinstance(sample, NodeSample) or not isinstance(attribution, Attribution):
            raise TypeError("step() takes a NodeSample and an Attribution")
        if self._last_tick is not None and sample.tick <= self._last_tick:
            raise ValueError(f"tick {sample.tick} is not after the previous tick {self._last_tick}")
        self._last_tick = sample.tick
        self._attribution = attribution
        borrowed: frozenset[str] = frozenset()
        if borrowed_activity:
            sample, borrowed = with_borrowed(sample, borrowed_activity)
        devices = devices_of(sample, attribution)
        domains = domains_of(devices)
        pools = memory_pools(devices, attribution)  # a GI split into CIs is one memory pool
        when = {"tick": sample.tick, "timestamp": sample.timestamp}
        findings = [
            *self._interference.step(domains, attribution, external=external_signals or EMPTY, **when),
            *self._memory.step(pools, attribution, **when),
            *self._quota.step(devices, attribution, pools=pools, **when),
            *self._unauthorized.step(devices, attribution, **when),
            *self._xid.step(sample, devices, attribution),
        ]
        if borrowed:
            findings = _mark_borrowed(findings, sample, borrowed)
        return tuple(sorted(findings, key=lambda finding: finding.key))


def _mark_borrowed(findings: list[Finding], sample: NodeSample, borrowed: frozenset[str]) -> list[Finding]:
    """Interference judged on a GPU where some activity came from outside NVML says so in its evidence."""
    gpus = {gpu.uuid for gpu in sample.gpus if any(mig.uuid in borrowed for mig in gpu.instances)}
    return [
        dataclasses.replace(f, evidence={**f.evidence, "activity_source": "dcgm-exporter"})
        if f.kind is FindingKind.INTERFERENCE and f.gpu_uuid in gpus else f
        for f in findings
    ]

