"""Detection and the eviction decision, run offline exactly as the agent runs them, minus the Kubernetes API.

Replay (a recorded trace) and scenario runs (the simulator) both need "what would the agent have found and asked
to evict at this tick". They must use the real detector, the real rules and the real pacer (hysteresis, cooldowns,
token bucket), or an offline report would promise evictions the agent never makes. The one thing they cannot do is
call the Eviction API; a request that reaches that point is given the result its mode stands for (observe →
observed, dry-run → dry_run, enforce → evicted, as if the API server accepted) and fed back to the pacer the way the
evictor would, so cooldowns start exactly as they do live.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from watchdog.action.decision import decide
from watchdog.action.pacing import Pacer
from watchdog.config import Policy
from watchdog.detection import Detector
from watchdog.model import Attribution, Decision, EvictionResult, Finding, Mode, NodeSample

MODE_RESULT = {Mode.OBSERVE: EvictionResult.OBSERVED, Mode.DRY_RUN: EvictionResult.DRY_RUN,
               Mode.ENFORCE: EvictionResult.EVICTED}


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one tick produced. ``sent`` holds the keys "finding key|ns/pod" of the decisions that reached the API."""

    sample: NodeSample
    attribution: Attribution
    findings: tuple[Finding, ...]
    decisions: tuple[Decision, ...]
    sent: frozenset[str] = frozenset()


def sent_key(decision: Decision) -> str:
    return f"{decision.finding_key}|{decision.namespace}/{decision.pod}"


class OfflineAgent:
    """The agent's detect → decide → pace loop with an evictor that never leaves the process."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.mode = policy.action.mode
        self._detector = Detector(policy.detection, tenant_label=policy.action.tenant_label)
        self._pacer = Pacer(policy.action)

    def step(self, sample: NodeSample, attribution: Attribution) -> StepResult:
        now = sample.timestamp
        findings = tuple(self._detector.step(sample, attribution))
        decisions = decide(findings, attribution, policy=self.policy.action, now=now)
        paced = self._pacer.pace(decisions, now=now, findings=findings, attribution=attribution)
        final: list[Decision] = []
        sent: set[str] = set()
        for decision in paced:
            if decision.result is None and decision.request is not None:
                result = MODE_RESULT[self.mode]
                self._pacer.record(decision.request, result, now=now)
                decision = replace(decision, result=result, detail=decision.detail or f"{self.mode.value} (offline)")
                sent.add(sent_key(decision))
            final.append(decision)
        return StepResult(sample, attribution, findings, tuple(final), frozenset(sent))
