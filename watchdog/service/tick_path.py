"""detect → decide → pace: the one function the live cycle, replay and the evaluation all call for a tick.

An offline report is only worth reading if it promises exactly what the agent would have done, so there is one
path from an admitted sample (the plausibility gate has run where the readings entered: the sampler live, the trace
reader offline) to the paced decisions, and the live cycle and `watchdog.evaluation` both go through `plan_tick`.
Only what comes after differs: the agent hands the decisions to its evictor, an offline run gives each would-be send
the result its mode stands for. Findings leave detection complete (DRA claim, activity source); nothing rewrites
them afterwards.

Every finding source runs fenced inside the detector (one that raises loses only its own findings, reported in
`TickPlan.failures`); decide + pace are fenced here, so a bug in the rules loses the tick's decisions — never its
findings, and never by acting on a partial plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Protocol

from watchdog.action import Pacer, would_be_for
from watchdog.action.planning import decide_and_pace
from watchdog.config.action import ActionPolicy
from watchdog.detection import Detector
from watchdog.model import Attribution, Decision, Finding, InstanceActivity, NodeSample


class Planner(Protocol):
    """Turns one tick's findings into paced decisions; returns them with the pacing time they were made at."""

    def plan(
        self, findings: Iterable[Finding], attribution: Attribution, *, tick: int | None = None
    ) -> tuple[list[Decision], float]: ...


@dataclass(frozen=True, slots=True)
class TickPlan:
    """One tick's findings and the decisions paced on them."""

    findings: tuple[Finding, ...]
    decisions: tuple[Decision, ...]
    decided_at: float  # the pacing (monotonic) time of the decisions
    failures: tuple[tuple[str, BaseException], ...] = ()  # (finding source, what it raised) this tick
    plan_error: BaseException | None = None  # decide + pace raised: no decision this tick


def plan_tick(
    *,
    detector: Detector,
    planner: Planner,
    sample: NodeSample,
    attribution: Attribution,
    signals: Mapping[str, float] | None = None,
    activity: Mapping[str, InstanceActivity] | None = None,
) -> TickPlan:
    """The findings of ``sample`` and the decisions paced on them. Raises only if the detector itself does (a sample
    out of order); each finding source's failure is in ``failures``."""
    findings = detector.step(sample, attribution, external_signals=signals, borrowed_activity=activity)
    failures = tuple(detector.last_failures)
    try:
        decisions, decided_at = planner.plan(findings, attribution, tick=sample.tick)
    except Exception as exc:  # never act on a partial plan; the findings still stand
        return TickPlan(findings, (), 0.0, failures, plan_error=exc)
    return TickPlan(findings, tuple(decisions), decided_at, failures)


class OfflinePlanner:
    """The agent's decide → pace with an evictor that never leaves the process: the pacing clock is the tick count
    times the tick length (a trace's wall-clock timestamps may step; its tick count does not), and each request let
    through is recorded as the result its mode stands for, as the evictor would record the API server's answer."""

    def __init__(self, policy: ActionPolicy, *, tick_seconds: float) -> None:
        self.policy = policy
        self.tick_seconds = tick_seconds
        self.pacer = Pacer(policy)

    def set_policy(self, policy: ActionPolicy, *, now: float) -> None:
        """A policy reloaded mid-run, as ``ActionStage.set_policy`` applies it: cooldowns and spent tokens kept."""
        self.policy = policy
        self.pacer.set_policy(policy, now=now)

    def plan(
        self, findings: Iterable[Finding], attribution: Attribution, *, tick: int | None = None
    ) -> tuple[list[Decision], float]:
        now = float(tick or 0) * self.tick_seconds
        paced = decide_and_pace(findings, attribution, self.policy, now, pacer=self.pacer, tick=tick)
        for decision in paced:
            if decision.result is None and decision.request is not None:
                self.pacer.record(decision.request, would_be_for(decision, attribution, self.policy.mode), now=now)
        return paced, now
