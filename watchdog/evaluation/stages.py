"""Detection and the eviction decision, run offline exactly as the agent runs them, minus the Kubernetes API.

Replay (a recorded trace) and scenario runs (the simulator) both need "what would the agent have found and asked
to evict at this tick". They must use the real detector, the real rules and the real pacer (hysteresis, cooldowns,
token bucket) and the policy exactly as the agent overlays it at runtime, or an offline report would promise
evictions the agent never makes. So they go through watchdog.action's `effective_policy` and `plan`, the functions
the live path shares. The one thing they cannot do is call the Eviction API; a request that reaches that point is
given the result its mode stands for (`would_be`: observe → observed, dry-run → dry_run, enforce → evicted, as if
the API server accepted) and fed back to the pacer the way the evictor would, so cooldowns start exactly as live.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from watchdog.action import Pacer, effective_policy, plan, would_be
from watchdog.attribution.join import with_claims
from watchdog.config import Policy
from watchdog.detection import Detector
from watchdog.model import Attribution, Decision, Finding, InstanceActivity, NodeSample


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
    """The agent's detect → decide → pace loop with an evictor that never leaves the process.

    ``own_namespace`` and ``tenant_label`` are the runtime settings the live agent overlays on the policy
    (Settings.namespace and Settings.attribution.tenant_label); pass them to replay what that agent would do.
    """

    def __init__(self, policy: Policy, *, own_namespace: str | None = None, tenant_label: str | None = None) -> None:
        self.policy = policy
        self.action_policy = effective_policy(policy.action, own_namespace=own_namespace, tenant_label=tenant_label)
        self.mode = self.action_policy.mode
        self._detector = Detector(policy.detection)
        self._pacer = Pacer(self.action_policy)

    def step(
        self,
        sample: NodeSample,
        attribution: Attribution,
        external_signals: Mapping[str, float] | None = None,
        *,
        borrowed_activity: Mapping[str, InstanceActivity] | None = None,
    ) -> StepResult:
        now = sample.timestamp
        # A trace does not record the tenant label: count tenants under the one this run applies, as the agent would.
        attribution = attribution.with_tenant_label(self.action_policy.tenant_label)
        findings = tuple(self._detector.step(sample, attribution, external_signals=external_signals,
                                             borrowed_activity=borrowed_activity))
        findings = with_claims(findings, attribution)  # as the live cycle does (service.cycle): the DRA claim
        paced = plan(findings, attribution, self.action_policy, now, pacer=self._pacer)
        final: list[Decision] = []
        sent: set[str] = set()
        for decision in paced:
            if decision.result is None and decision.request is not None:
                decision = replace(decision, result=would_be(self.mode),
                                   detail=decision.detail or f"{self.mode.value} (offline)")
                sent.add(sent_key(decision))
            final.append(decision)
        return StepResult(sample, attribution, findings, tuple(final), frozenset(sent))
