"""Pacing on a simulated clock: hysteresis, cooldowns, the token bucket, evicted memory and retry backoff."""

from __future__ import annotations

from dataclasses import replace

import pytest

from action_builders import attribution, finding, pod
from watchdog.action import Pacer, decide, plan
from watchdog.config.action import ActionPolicy
from watchdog.model import EvictionResult as R
from watchdog.model import FindingKind as K

FAST = {"interference": {"for_seconds": 0}, "unauthorized": {"for_seconds": 0}}


def policy(**overrides) -> ActionPolicy:
    return ActionPolicy.model_validate({**FAST, **overrides})


def setup(n: int = 1, *, ns: str = "b"):
    culprits = [pod(f"c{i}", ns=ns) for i in range(n)]
    victim = pod("v", priority=100)
    findings = [finding(culprit=c, victims=(victim,), key=f"f{i}") for i, c in enumerate(culprits)]
    return findings, attribution(*culprits, victim)


def cycle(pacer: Pacer, findings, attr, now: float, *, result: R | None = None, retry_after=None):
    decisions = decide(findings, attr, policy=pacer.policy, now=now)
    paced = pacer.pace(decisions, now=now, findings=findings, attribution=attr)
    if result is not None:
        for d in paced:
            if d.result is None:
                pacer.record(d.request, result, now=now, retry_after=retry_after)
    return [d.result for d in paced]


def test_hysteresis_pending_until_for_has_passed():
    pacer = Pacer(ActionPolicy.model_validate({"interference": {"for_seconds": 60}}))
    findings, attr = setup()  # since=0
    assert cycle(pacer, findings, attr, 59.0) == [R.PENDING]
    assert cycle(pacer, findings, attr, 60.0) == [None]


def test_token_bucket_limits_and_refills():
    pacer = Pacer(policy(node_evictions_per_minute=2, node_eviction_burst=2, tenant_cooldown_seconds=0))
    findings, attr = setup(4)
    assert cycle(pacer, findings, attr, 0.0, result=R.EVICTED) == [None, None, R.RATE_LIMITED, R.RATE_LIMITED]
    # c0, c1 are now remembered as evicted; c2, c3 wait for tokens (one per 30 s).
    assert cycle(pacer, findings, attr, 29.0) == [R.ALREADY_EVICTED, R.ALREADY_EVICTED, R.RATE_LIMITED, R.RATE_LIMITED]
    assert cycle(pacer, findings, attr, 30.0, result=R.EVICTED)[2:] == [None, R.RATE_LIMITED]
    assert cycle(pacer, findings, attr, 60.0)[3] is None


def test_pace_only_checks_record_takes_the_token():
    pacer = Pacer(policy())
    findings, attr = setup()
    assert cycle(pacer, findings, attr, 0.0) == [None]
    assert cycle(pacer, findings, attr, 0.0) == [None]  # nothing was recorded (e.g. paused): token kept
    pacer.record(decide(findings, attr, policy=pacer.policy, now=0)[0].request, R.PAUSED, now=0.0)
    assert pacer.tokens(0.0) == 1.0
    cycle(pacer, findings, attr, 0.0, result=R.DRY_RUN)
    assert pacer.tokens(0.0) == 0.0


def test_pod_cooldown_after_dry_run_and_tenant_cooldown():
    p = policy(pod_cooldown_seconds=600, tenant_cooldown_seconds=300, node_evictions_per_minute=600)
    pacer = Pacer(p)
    findings, attr = setup(2)
    assert cycle(pacer, findings, attr, 0.0, result=R.DRY_RUN) == [None, R.RATE_LIMITED]
    # c1 shares the tenant "b": tenant cooldown; c0 has its own pod cooldown.
    assert cycle(pacer, findings, attr, 10.0) == [R.COOLDOWN, R.COOLDOWN]
    assert cycle(pacer, findings, attr, 300.0) == [R.COOLDOWN, None]
    assert cycle(pacer, findings, attr, 600.0) == [None, R.RATE_LIMITED]  # burst 1: one token per cycle


def test_tenant_cooldown_counts_tenants_as_the_pod_index_does():
    # The policy names no label: the tick's pod index is what counts tenants (the agent builds it from the policy).
    p = policy(pod_cooldown_seconds=0, node_evictions_per_minute=600, node_eviction_burst=5)
    pacer = Pacer(p)
    a = pod("a", ns="ns1", labels={"tenant": "ml"})
    b = pod("b", ns="ns2", labels={"tenant": "ml"})
    c = pod("c", ns="ns3", labels={"tenant": "web"})
    v = pod("v", priority=100)
    findings = [finding(culprit=x, victims=(v,), key=x.name) for x in (a, b, c)]
    attr = attribution(a, b, c, v, tenant_label="tenant")
    assert cycle(pacer, findings[:1], attr, 0.0, result=R.EVICTED) == [None]
    assert pacer.tenant("ns1/a") == "ml"
    assert cycle(pacer, findings[1:], attr, 1.0) == [R.COOLDOWN, None]


def test_a_pod_re_read_before_its_send_keeps_the_tenant_the_index_gave_it():
    pacer = Pacer(policy())
    a, v = pod("a", ns="ns1", labels={"tenant": "ml"}, owner_kind="Job"), pod("v", priority=100)
    assert cycle(pacer, [finding(culprit=a, victims=(v,), key="a")], attribution(a, v, tenant_label="tenant"),
                 0.0) == [None]
    pacer.learn(replace(a, labels={}))  # the evictor's re-read: the API's pod, no tenant rule
    assert pacer.tenant("ns1/a") == "ml" and pacer.owner_kind("ns1/a") == "Job"
    fresh = Pacer(policy())
    fresh.learn(a)  # never learned from an index: counted under its namespace
    assert fresh.tenant("ns1/a") is None


def test_evicted_memory_then_forgotten():
    pacer = Pacer(policy(evicted_memory_seconds=300, pod_cooldown_seconds=0, tenant_cooldown_seconds=0))
    findings, attr = setup()
    cycle(pacer, findings, attr, 0.0, result=R.EVICTED)
    assert cycle(pacer, findings, attr, 299.0) == [R.ALREADY_EVICTED]
    assert cycle(pacer, findings, attr, 300.0) == [None]


def test_backoff_doubles_from_30_to_600_and_resets_on_success():
    # evicted_memory_seconds=0: a GONE pod is not remembered here, so the reset of the backoff itself is visible.
    pacer = Pacer(policy(node_evictions_per_minute=6000, node_eviction_burst=10, evicted_memory_seconds=0))
    findings, attr = setup()
    now, waits = 0.0, []
    for _ in range(7):
        assert cycle(pacer, findings, attr, now, result=R.BLOCKED_PDB) == [None]
        wait = 1.0
        while cycle(pacer, findings, attr, now + wait) == [R.COOLDOWN]:
            wait += 1.0
        waits.append(wait)
        now += wait
    assert waits == [30, 60, 120, 240, 480, 600, 600]
    cycle(pacer, findings, attr, now, result=R.GONE)  # success-like: backoff forgotten
    cycle(pacer, findings, attr, now, result=R.ERROR)
    assert cycle(pacer, findings, attr, now + 30) == [None]


def test_retry_after_extends_backoff():
    pacer = Pacer(policy())
    findings, attr = setup()
    cycle(pacer, findings, attr, 0.0, result=R.BLOCKED_PDB, retry_after=100)
    assert cycle(pacer, findings, attr, 99.0) == [R.COOLDOWN]
    assert cycle(pacer, findings, attr, 100.0) == [None]


def test_one_eviction_per_finding_and_per_pod_per_cycle():
    p = ActionPolicy.model_validate({"xid": {"enabled": True, "drain_all": True}, "node_eviction_burst": 5})
    pacer = Pacer(p)
    x, y = pod("x"), pod("y")
    f = finding(K.XID, culprit=x, victims=(y,))
    attr = attribution(x, y)
    assert cycle(pacer, [f], attr, 0.0) == [None, R.RATE_LIMITED]
    # The same pod named by two findings is requested once.
    v = pod("v", priority=100)
    fs = [finding(culprit=x, victims=(v,), key="k1"), finding(K.UNAUTHORIZED, culprit=x, victims=(v,), key="k2")]
    assert cycle(Pacer(policy(node_eviction_burst=5)), fs, attribution(x, v), 0.0) == [None, R.COOLDOWN]


def test_stopped_decisions_pass_through():
    pacer = Pacer(policy())
    f = finding(culprit=None)
    assert cycle(pacer, [f], attribution(), 0.0) == [R.UNSAFE]


def test_policy_reload_keeps_memory_and_spent_tokens():
    pacer = Pacer(policy())
    findings, attr = setup()
    cycle(pacer, findings, attr, 0.0, result=R.EVICTED)
    pacer.set_policy(policy(node_eviction_burst=3))
    # A reload keeps the spent token rather than filling the new bucket (3.0 here): no free burst of evictions.
    assert pacer.tokens(1.0) == pytest.approx(1 / 30)  # the spent token, refilled 1 s at 2/min
    assert cycle(pacer, findings, attr, 1.0) == [R.ALREADY_EVICTED]


def test_plan_carries_pacing_across_cycles_without_io():
    p = policy(mode="enforce")
    pacer = Pacer(p)
    findings, attr = setup()
    first = plan(findings, attr, p, 0.0, pacer=pacer)
    assert [d.result for d in first] == [None]
    assert [d.result for d in plan(findings, attr, p, 1.0, pacer=pacer)] == [R.ALREADY_EVICTED]
    assert [d.result for d in plan(findings, attr, p, 1.0)] == [None]  # a fresh pacer knows nothing


def test_a_reload_never_grants_a_fresh_burst():
    pacer = Pacer(policy(tenant_cooldown_seconds=0))
    findings, attr = setup(5)
    assert cycle(pacer, findings, attr, 0.0, result=R.EVICTED).count(None) == 1  # burst 1: one at t=0
    pacer.set_policy(policy(tenant_cooldown_seconds=0, node_eviction_burst=3), now=0.0)
    assert cycle(pacer, findings, attr, 0.0).count(None) == 0  # still t=0: the spent token stays spent
    assert cycle(pacer, findings, attr, 60.0).count(None) == 2  # then it refills at 2/min up to the new burst 3


def test_a_reload_to_a_smaller_burst_caps_the_tokens_left():
    pacer = Pacer(policy(node_eviction_burst=5))
    pacer.set_policy(policy(node_eviction_burst=2, node_evictions_per_minute=1), now=0.0)
    assert pacer.tokens(0.0) == 2.0
    assert pacer.tokens(600.0) == 2.0


def test_gone_is_remembered_by_uid_for_evicted_memory_seconds():
    pacer = Pacer(policy(node_evictions_per_minute=600, node_eviction_burst=5, evicted_memory_seconds=100))
    findings, attr = setup()
    assert cycle(pacer, findings, attr, 0.0, result=R.GONE) == [None]
    assert cycle(pacer, findings, attr, 1.0) == [R.GONE]
    assert cycle(pacer, findings, attr, 99.0) == [R.GONE]
    assert cycle(pacer, findings, attr, 100.0) == [None]
    c0 = attr.pods["uid-b-c0"]
    replacement = replace(c0, uid="uid-new")  # the same name, another pod
    f = finding(culprit=replacement, victims=findings[0].victims, key="f0")
    cycle(pacer, findings, attr, 100.0, result=R.GONE)
    assert cycle(pacer, [f], attribution(replacement, attr.pods["uid-team-a-v"]), 101.0) == [None]


def test_an_api_rate_limit_takes_a_token_and_backs_the_pod_off_for_retry_after():
    pacer = Pacer(policy(node_evictions_per_minute=600, node_eviction_burst=5))
    findings, attr = setup()
    assert cycle(pacer, findings, attr, 0.0, result=R.RATE_LIMITED, retry_after=45.0) == [None]
    assert pacer.tokens(0.0) == 4.0
    assert cycle(pacer, findings, attr, 44.0) == [R.COOLDOWN]
    assert cycle(pacer, findings, attr, 45.0) == [None]


# ------------------------------------------------------------------ restarts and lineages


def test_a_pacer_started_at_process_start_has_an_empty_bucket():
    pacer = Pacer(policy(), started=100.0)  # 2/min, burst 1
    findings, attr = setup()
    assert pacer.tokens(100.0) == 0.0
    assert cycle(pacer, findings, attr, 129.0) == [R.RATE_LIMITED]
    assert cycle(pacer, findings, attr, 130.0) == [None]  # the first send after 1/rate
    assert Pacer(policy()).tokens(0.0) == 1.0  # a replay's pacer (no start) begins full, as before


def rs_pod(name: str, **fields):
    return pod(name, ns="ml", owner_kind="ReplicaSet", **fields)


def evict_each(pacer: Pacer, pods, victim, *, at: float) -> list:
    """One cycle per pod at `at`: its finding, decided and paced, recorded as evicted when let through."""
    results = []
    for p in pods:
        f = finding(culprit=p, victims=(victim,), key="f")
        results.append(cycle(pacer, [f], attribution(p, victim), at, result=R.EVICTED)[0])
    return results


def test_a_replicaset_replacement_waits_out_a_doubling_workload_cooldown():
    p = policy(pod_cooldown_seconds=600, tenant_cooldown_seconds=300, node_evictions_per_minute=600,
               node_eviction_burst=5, owner_cooldown_max_seconds=2400, owner_repeat_window_seconds=3600)
    pacer = Pacer(p)
    victim = pod("v", priority=100)
    replicas = [rs_pod(f"train-5d8f9c7b6-{suffix}") for suffix in ("bcdfg", "hjklm", "npqrs", "tvwxz", "24567")]
    # Keyed by name alone the replacement only waited the 300 s tenant cooldown: evicted every 5 min forever.
    assert evict_each(pacer, replicas[:1], victim, at=0.0) == [None]
    assert evict_each(pacer, replicas[1:2], victim, at=599.0) == [R.COOLDOWN]
    assert evict_each(pacer, replicas[1:2], victim, at=600.0) == [None]  # second: 1 200 s now
    assert evict_each(pacer, replicas[2:3], victim, at=1799.0) == [R.COOLDOWN]
    assert evict_each(pacer, replicas[2:3], victim, at=1800.0) == [None]  # third: 2 400 s (the cap)
    assert evict_each(pacer, replicas[3:4], victim, at=4199.0) == [R.COOLDOWN]
    assert evict_each(pacer, replicas[3:4], victim, at=4200.0) == [None]  # fourth: still 2 400 s, capped
    # Quiet for longer than the window after the cooldown: the next one counts as a first again (600 s).
    later = 4200.0 + 2400.0 + 3600.0
    assert evict_each(pacer, replicas[4:5], victim, at=later) == [None]
    f = finding(culprit=replicas[0], victims=(victim,), key="f")
    assert cycle(pacer, [f], attribution(replicas[0], victim), later + 600.0) == [None]


def test_other_workloads_and_name_owned_pods_have_their_own_lineage():
    p = policy(pod_cooldown_seconds=600, tenant_cooldown_seconds=0, node_evictions_per_minute=600,
               node_eviction_burst=5)
    pacer = Pacer(p)
    victim = pod("v", priority=100)
    assert evict_each(pacer, [rs_pod("train-5d8f9c7b6-bcdfg")], victim, at=0.0) == [None]
    others = [
        rs_pod("serve-6c7d8f9b5-bcdfg"),  # another ReplicaSet
        pod("train-5d8f9c7b6-fghjk", ns="other", owner_kind="ReplicaSet"),  # the same name in another namespace
        pod("train-5d8f9c7b6-hjklm", ns="ml", owner_kind="StatefulSet"),  # a StatefulSet keeps its pods' names
        pod("train-5d8f9c7b6-npqrs", ns="ml"),  # a bare pod is its own lineage
        rs_pod("train-5d8f9c7b6-AAAAA"),  # not a generated suffix (upper case): its own name
    ]
    assert evict_each(pacer, others, victim, at=1.0) == [None] * 5


def test_restore_starts_the_cooldowns_of_past_attempts_in_order():
    from watchdog.action import PastAttempt
    from watchdog.model import PodRef

    p = policy(pod_cooldown_seconds=600, tenant_cooldown_seconds=300, evicted_memory_seconds=300,
               node_evictions_per_minute=600, node_eviction_burst=5)
    pacer = Pacer(p, started=1_000.0)
    past = [
        PastAttempt(PodRef("ml", "train-5d8f9c7b6-fghjk", "u2"), R.EVICTED, 900.0, "ml", "ReplicaSet"),
        PastAttempt(PodRef("ml", "train-5d8f9c7b6-bcdfg", "u1"), R.EVICTED, 100.0, "ml", "ReplicaSet"),
        PastAttempt(PodRef("ml", "x", "u3"), R.BLOCKED_PDB, 950.0),  # not an attempt that went through
    ]
    assert pacer.restore(past) == 2
    assert pacer.tokens(1_000.0) == 0.0  # restoring takes no token and gives none
    victim = pod("v", priority=100)
    replacement = rs_pod("train-5d8f9c7b6-lmnpq")
    f = finding(culprit=replacement, victims=(victim,), key="f")
    # The second eviction (at 900, a repeat of the one at 100) set a 1 200 s workload cooldown: until 2 100.
    assert cycle(pacer, [f], attribution(replacement, victim), 2_099.0) == [R.COOLDOWN]
    assert cycle(pacer, [f], attribution(replacement, victim), 2_100.0) == [None]
