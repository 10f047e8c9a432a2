"""Detection and the eviction decision, run offline exactly as the agent runs them, minus the Kubernetes API.

Replay (a recorded trace) and scenario runs (the simulator) both need "what would the agent have found and asked
to evict at this tick". They must use the real detector, the real rules and the real pacer (hysteresis, cooldowns,
token bucket) and the policy exactly as the agent overlays it at runtime, or an offline report would promise
evictions the agent never makes. So they go through watchdog.action's `effective_policy` and
``service.tick_path.plan_tick``, the function the live cycle calls. The one thing they cannot do is call the
Eviction API; a request that reaches that point is given the result its mode stands for (`would_be`: observe →
observed, dry-run → dry_run, enforce → evicted, as if the API server accepted) and fed back to the pacer the way
the evictor would, so cooldowns start exactly as live.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Mapping

from watchdog.action import effective_policy, would_be_for
from watchdog.config import Policy
from watchdog.detection import Detector
from watchdog.model import Attribution, Decision, Finding, InstanceActivity, NodeSample
from watchdog.service.tick_path import OfflinePlanner, plan_tick


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
    """The agent's detect → decide → pace loop (``service.tick_path.plan_tick``, the very function the live cycle
    calls) with an evictor that never leaves the process.

    ``own_namespace`` and ``tenant_label`` are the runtime settings the live agent overlays on the policy
    (Settings.namespace, and the tenant label when the policy names none); pass them to replay what that agent would do.
    ``tick_seconds``: the tick length the input was sampled at (a trace's header says it): every guarantee runs on
    tick × tick_seconds, as the live agent's run on its monotonic clock, whatever the recorded timestamps do.
    """

    def __init__(self, policy: Policy, *, own_namespace: str | None = None, tenant_label: str | None = None,
                 tick_seconds: float = 1.0) -> None:
        self.policy = policy
        self._overlay = {"own_namespace": own_namespace, "tenant_label": tenant_label}
        self.action_policy = effective_policy(policy.action, **self._overlay)
        self.mode = self.action_policy.mode
        self._detector = Detector(policy.detection)
        self._planner = OfflinePlanner(self.action_policy, tick_seconds=tick_seconds)
        self.failures: Counter[str] = Counter()  # finding sources (or "plan") that raised, by name

    def set_policy(self, policy: Policy, *, tick: int) -> None:
        """Apply ``policy`` from ``tick`` on, as the agent applies a reload: learned baselines, open episodes,
        cooldowns and spent tokens are kept."""
        self.policy = policy
        self.action_policy = effective_policy(policy.action, **self._overlay)
        self.mode = self.action_policy.mode
        self._detector.set_policy(policy.detection)
        self._planner.set_policy(self.action_policy, now=tick * self._planner.tick_seconds)

    def step(
        self,
        sample: NodeSample,
        attribution: Attribution,
        external_signals: Mapping[str, float] | None = None,
        *,
        borrowed_activity: Mapping[str, InstanceActivity] | None = None,
    ) -> StepResult:
        # A trace does not record the tenant label: count tenants under the one this run applies, as the agent would.
        attribution = attribution.with_tenant_label(self.action_policy.tenant_label)
        planned = plan_tick(detector=self._detector, planner=self._planner, sample=sample, attribution=attribution,
                            signals=external_signals, activity=borrowed_activity)
        self.failures.update(name for name, _ in planned.failures)
        if planned.plan_error is not None:
            self.failures["plan"] += 1
        final: list[Decision] = []
        sent: set[str] = set()
        for decision in planned.decisions:
            if decision.result is None and decision.request is not None:
                decision = replace(decision, result=would_be_for(decision, attribution, self.mode),
                                   detail=decision.detail or f"{self.mode.value} (offline)")
                sent.add(sent_key(decision))
            final.append(decision)
        return StepResult(sample, attribution, planned.findings, tuple(final), frozenset(sent))
