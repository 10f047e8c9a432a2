"""A tenant's (and a workload's) cooldown holds within one cycle, not only across cycles.

Two findings of the same cycle may name two pods of one tenant; with a burst > 1 the cooldown must still count the
attempt made earlier in the same cycle, not only those recorded in earlier cycles. Both paths are checked: `plan`
(replay and scenario runs) and the pacer as the agent's ActionStage uses it.
"""

from __future__ import annotations

from action_builders import attribution, finding, pod
from watchdog.action import Pacer, decide, plan
from watchdog.config.action import ActionPolicy
from watchdog.model import EvictionResult as R

ROOMY = {"interference": {"for_seconds": 0}, "node_eviction_burst": 5, "node_evictions_per_minute": 600}


def two_findings(first, second, *, tenant_label=None):
    victim = pod("v", ns="serving", priority=1000)
    findings = [finding(culprit=first, victims=(victim,), key="f1"),
                finding(culprit=second, victims=(victim,), key="f2")]
    return findings, attribution(first, second, victim, tenant_label=tenant_label)


def test_two_pods_of_one_tenant_in_one_cycle_only_one_goes():
    findings, attr = two_findings(pod("a", ns="batch"), pod("b", ns="batch"))
    decisions = plan(findings, attr, ActionPolicy.model_validate(ROOMY), 0.0)
    assert [d.result for d in decisions] == [None, R.COOLDOWN]
    assert "tenant cooldown for batch" in decisions[1].detail


def test_the_tenant_label_counts_not_the_namespace():
    a = pod("a", ns="ns1", labels={"team": "x"})
    b = pod("b", ns="ns2", labels={"team": "x"})
    findings, attr = two_findings(a, b, tenant_label="team")
    policy = ActionPolicy.model_validate({**ROOMY, "tenant_label": "team"})
    assert [d.result for d in plan(findings, attr, policy, 0.0)] == [None, R.COOLDOWN]


def test_two_pods_of_one_workload_in_one_cycle_only_one_goes():
    # Two tenants (by label), one ReplicaSet: the workload's cooldown holds within the cycle too.
    a = pod("web-7d4f9-bcdfg", ns="shop", owner_kind="ReplicaSet", labels={"team": "x"})
    b = pod("web-7d4f9-hjklm", ns="shop", owner_kind="ReplicaSet", labels={"team": "y"})
    findings, attr = two_findings(a, b, tenant_label="team")
    policy = ActionPolicy.model_validate({**ROOMY, "tenant_label": "team"})
    decisions = plan(findings, attr, policy, 0.0)
    assert [d.result for d in decisions] == [None, R.COOLDOWN] and "workload" in decisions[1].detail


def test_different_tenants_both_go_and_zero_cooldown_holds_nobody():
    findings, attr = two_findings(pod("a", ns="batch"), pod("b", ns="research"))
    assert [d.result for d in plan(findings, attr, ActionPolicy.model_validate(ROOMY), 0.0)] == [None, None]
    findings, attr = two_findings(pod("a", ns="batch"), pod("b", ns="batch"))
    no_tenant_cooldown = ActionPolicy.model_validate({**ROOMY, "tenant_cooldown_seconds": 0})
    assert [d.result for d in plan(findings, attr, no_tenant_cooldown, 0.0)] == [None, None]


def test_the_live_pacer_holds_the_tenant_within_the_cycle_too():
    findings, attr = two_findings(pod("a", ns="batch"), pod("b", ns="batch"))
    pacer = Pacer(ActionPolicy.model_validate(ROOMY))
    paced = pacer.pace(decide(findings, attr, policy=pacer.policy, now=0.0), now=0.0, findings=findings,
                       attribution=attr)
    assert [d.result for d in paced] == [None, R.COOLDOWN]
