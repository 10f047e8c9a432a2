"""Every decision rule, each protected case, and the choice among candidates."""

from __future__ import annotations

from dataclasses import replace

import pytest

from action_builders import attribution, finding, pod, ref
from watchdog.action import decide
from watchdog.action.decision import relief_rank
from watchdog.config.action import ActionPolicy
from watchdog.model import EvictionResult as R
from watchdog.model import FindingKind as K
from watchdog.model import PodRef

POLICY = ActionPolicy()
GiB = 1024**3


def one(f, attr, policy=POLICY):
    decisions = decide([f], attr, policy=policy, now=1000.0)
    assert len(decisions) == 1
    return decisions[0]


# ------------------------------------------------------------------------------------------- interference


def test_interference_evicts_a_culprit_lower_than_every_victim():
    batch, web, api = pod("batch", ns="b", priority=10), pod("web", priority=100), pod("api", priority=50)
    d = one(finding(culprit=batch, victims=(web, api)), attribution(batch, web, api))
    assert d.result is None and d.request is not None
    assert d.request.pod == ref(batch) and d.request.priority == 10
    assert d.request.protects == ((ref(web), 100), (ref(api), 50))
    assert d.request.evidence["power_watts"] == 690.0
    assert d.request.finding_key == "interference/gpu-0" and d.reason == "interference"
    assert (d.namespace, d.pod) == ("b", "batch")


@pytest.mark.parametrize("culprit_priority", [100, 101, 1000])
def test_interference_refuses_a_culprit_not_strictly_lower(culprit_priority):
    batch, web, api = pod("batch", ns="b", priority=culprit_priority), pod("web", priority=100), pod("api", priority=50)
    d = one(finding(culprit=batch, victims=(web, api)), attribution(batch, web, api))
    assert d.result is R.NOT_LOWER_PRIORITY
    assert "web" in d.detail and d.request.pod == ref(batch)  # the victim closest to being protected
    assert d.request.protects == ()  # a refused eviction protects nobody


@pytest.mark.parametrize("culprit_priority", [50, 51, 99])
def test_a_victim_not_above_the_culprit_never_vetoes_the_relief_of_those_above(culprit_priority):
    # api (50) is listed as a victim because its clock fell too; being no higher than batch, it vetoes nothing.
    batch, web, api = pod("batch", ns="b", priority=culprit_priority), pod("web", priority=100), pod("api", priority=50)
    d = one(finding(culprit=batch, victims=(web, api)), attribution(batch, web, api))
    assert d.result is None and d.request.pod == ref(batch)
    assert d.request.protects == ((ref(web), 100),)  # exactly the victims strictly above it


def test_interference_without_culprit_is_unsafe():
    web = pod("web", priority=100)
    d = one(finding(culprit=None, victims=(web,)), attribution(web))
    assert d.result is R.UNSAFE and d.request is None


def test_interference_with_culprit_unknown_to_the_cache_is_unsafe():
    web = pod("web", priority=100)
    d = one(finding(culprit=PodRef("b", "ghost"), victims=(web,)), attribution(web))
    assert d.result is R.UNSAFE and "ghost" in d.detail


def test_interference_with_unknown_victim_is_unsafe():
    batch = pod("batch", ns="b")
    d = one(finding(culprit=batch, victims=(PodRef("a", "gone"),)), attribution(batch))
    assert d.result is R.UNSAFE


def test_interference_without_live_victims_has_no_candidate():
    batch, web = pod("batch", ns="b"), pod("web", priority=5, phase="Succeeded")
    assert one(finding(culprit=batch, victims=(web,)), attribution(batch, web)).result is R.NO_CANDIDATE


def test_unhealthy_attribution_is_unsafe_for_every_kind():
    batch, web = pod("batch", ns="b"), pod("web", priority=100)
    attr = attribution(batch, web, healthy=False)
    for kind in (K.INTERFERENCE, K.MEMORY_PRESSURE, K.QUOTA, K.UNAUTHORIZED):
        d = one(finding(kind, culprit=batch, victims=(web,), usage={"b/batch": 1.0}, tenant="b"), attr)
        assert d.result is R.UNSAFE, kind


# -------------------------------------------------------------------------------------------- protected


SYSTEM = 2_000_000_000


@pytest.mark.parametrize(
    ("culprit", "expected", "words"),
    [
        (pod("c", priority=1_000_000), R.PROTECTED, "floor"),
        (pod("c", priority=SYSTEM), R.PROTECTED, "floor"),
        (pod("c", ns="kube-system"), R.PROTECTED, "namespace kube-system"),
        (pod("c", annotations={"gpu-watchdog.io/protected": "true"}), R.PROTECTED, "annotated"),
        (pod("c", annotations={"gpu-watchdog.io/protected": "True "}), R.PROTECTED, "annotated"),
        (pod("c", owner_kind="DaemonSet"), R.PROTECTED, "DaemonSet"),
        (pod("c", mirror=True), R.PROTECTED, "static"),
        (pod("c", owner_kind="Node"), R.PROTECTED, "static"),
        (pod("c", annotations={"kubernetes.io/config.mirror": "abc"}), R.PROTECTED, "static"),
        (pod("c", deleting=True), R.ALREADY_EVICTED, "terminating"),
        (pod("c", phase="Failed"), R.GONE, "ended"),
    ],
)
def test_protected_pods_are_never_evicted(culprit, expected, words):
    victim = pod("v", ns="v", priority=SYSTEM - 1)
    for kind in (K.INTERFERENCE, K.UNAUTHORIZED):
        d = one(finding(kind, culprit=culprit, victims=(victim,)), attribution(culprit, victim))
        assert d.result is expected, kind
        assert words in d.detail


def test_annotation_false_does_not_protect():
    c, v = pod("c", annotations={"gpu-watchdog.io/protected": "false"}), pod("v", priority=5)
    assert one(finding(culprit=c, victims=(v,)), attribution(c, v)).result is None


def test_own_namespace_is_protected_at_runtime():
    policy = ActionPolicy().with_own_namespace("gpu-watchdog")
    c, v = pod("c", ns="gpu-watchdog"), pod("v", priority=5)
    d = one(finding(K.UNAUTHORIZED, culprit=c, victims=(v,)), attribution(c, v), policy)
    assert d.result is R.PROTECTED


def test_custom_floor_and_namespaces():
    policy = ActionPolicy(priority_floor=100, protected_namespaces=("infra",))
    c, v = pod("c", priority=100), pod("v", priority=500)
    assert one(finding(culprit=c, victims=(v,)), attribution(c, v), policy).result is R.PROTECTED
    c3 = pod("c3", ns="team-b", priority=1)
    assert one(finding(culprit=c3, victims=(v,)), attribution(c3, v), policy).result is None
    # The policy adds protections, never removes the floor's: kube-system stays protected without being listed.
    c2 = pod("c2", ns="kube-system", priority=1)
    assert one(finding(culprit=c2, victims=(v,)), attribution(c2, v), policy).result is R.PROTECTED


# ------------------------------------------------------------------------------------------ memory pressure


def test_memory_pressure_picks_above_request_before_priority():
    # kubelet order: use above request first, then priority, then use.
    low_within = pod("low", priority=0, gpu_memory_request_bytes=40 * GiB)
    mid_above = pod("mid", priority=10, gpu_memory_request_bytes=8 * GiB)
    victim = pod("v", priority=100, gpu_memory_request_bytes=40 * GiB)
    usage = {"team-a/low": 20 * GiB, "team-a/mid": 16 * GiB, "team-a/v": 30 * GiB}
    f = finding(K.MEMORY_PRESSURE, victims=(victim,), usage=usage, needed=10 * GiB)
    d = one(f, attribution(low_within, mid_above, victim))
    assert d.request.pod.name == "mid"
    assert d.request.evidence["use"] == 16 * GiB and d.request.evidence["needed"] == 10 * GiB


def test_memory_pressure_skips_pods_that_free_too_little():
    small = pod("small", priority=0)
    big = pod("big", priority=5)
    victim = pod("v", priority=100)
    usage = {"team-a/small": 2 * GiB, "team-a/big": 12 * GiB, "team-a/v": 30 * GiB}
    f = finding(K.MEMORY_PRESSURE, victims=(victim,), usage=usage, needed=10 * GiB)
    d = one(f, attribution(small, big, victim))
    assert d.request.pod.name == "big"


def test_memory_pressure_not_enough():
    a, b, v = pod("a"), pod("b"), pod("v", priority=100)
    usage = {"team-a/a": 2 * GiB, "team-a/b": 3 * GiB, "team-a/v": 30 * GiB}
    d = one(finding(K.MEMORY_PRESSURE, victims=(v,), usage=usage, needed=10 * GiB), attribution(a, b, v))
    assert d.result is R.NOT_ENOUGH


def test_memory_pressure_never_evicts_above_the_pods_it_protects():
    hog, v = pod("hog", priority=200), pod("v", priority=100)
    usage = {"team-a/hog": 50 * GiB, "team-a/v": 10 * GiB}
    d = one(finding(K.MEMORY_PRESSURE, victims=(v,), usage=usage, needed=10 * GiB), attribution(hog, v))
    assert d.result is R.NOT_LOWER_PRIORITY and d.request.pod.name == "hog"


def test_memory_pressure_equal_priority_allowed_and_protected_skipped():
    guarded = pod("guarded", annotations={"gpu-watchdog.io/protected": "true"})
    hog, v = pod("hog", priority=100), pod("v", priority=100)
    usage = {"team-a/guarded": 60 * GiB, "team-a/hog": 50 * GiB, "team-a/v": 10 * GiB}
    d = one(finding(K.MEMORY_PRESSURE, victims=(v,), usage=usage, needed=10 * GiB), attribution(guarded, hog, v))
    assert d.request.pod.name == "hog" and d.result is None


def test_memory_pressure_only_protected_candidates():
    guarded, v = pod("guarded", owner_kind="DaemonSet"), pod("v", priority=100)
    usage = {"team-a/guarded": 60 * GiB, "team-a/v": 1 * GiB}
    d = one(finding(K.MEMORY_PRESSURE, victims=(v,), usage=usage, needed=10 * GiB), attribution(guarded, v))
    assert d.result is R.PROTECTED and "DaemonSet" in d.detail


def test_memory_pressure_waits_while_a_candidate_terminates():
    leaving, other, v = pod("leaving", deleting=True), pod("other"), pod("v", priority=100)
    usage = {"team-a/leaving": 20 * GiB, "team-a/other": 20 * GiB, "team-a/v": 1 * GiB}
    d = one(finding(K.MEMORY_PRESSURE, victims=(v,), usage=usage, needed=10 * GiB), attribution(leaving, other, v))
    assert d.result is R.ALREADY_EVICTED


def test_memory_pressure_without_pods_has_no_candidate():
    d = one(finding(K.MEMORY_PRESSURE, usage={"x/unknown": 5.0}, needed=1.0), attribution())
    assert d.result is R.NO_CANDIDATE


# ----------------------------------------------------------------------------------------------------- quota


def test_quota_evicts_the_tenants_lowest_priority_pod_that_frees_enough():
    a0, a1, a2 = pod("a0", priority=0), pod("a1", priority=0, created=50.0), pod("a2", priority=5)
    other = pod("o", ns="team-b", priority=-10)
    usage = {"team-a/a0": 1.0, "team-a/a1": 3.0, "team-a/a2": 9.0, "team-b/o": 9.0}
    d = one(finding(K.QUOTA, tenant="team-a", usage=usage, needed=2.0), attribution(a0, a1, a2, other))
    assert d.request.pod.name == "a1"  # a0 frees too little; team-b is not the tenant


def test_quota_ties_go_to_largest_use_then_youngest():
    old, young, big = pod("old", created=10.0), pod("young", created=20.0), pod("big", created=5.0)
    usage = {"team-a/old": 4.0, "team-a/young": 4.0}
    assert one(finding(K.QUOTA, tenant="team-a", usage=usage), attribution(old, young)).request.pod.name == "young"
    usage = {"team-a/old": 4.0, "team-a/young": 4.0, "team-a/big": 5.0}
    assert one(finding(K.QUOTA, tenant="team-a", usage=usage), attribution(old, young, big)).request.pod.name == "big"


def test_quota_tenant_by_the_pod_indexs_label():
    # The tick's pod index carries the tenant rule; the rules read it there, never from a policy field.
    x = pod("x", ns="ns1", labels={"tenant": "ml"})
    y = pod("y", ns="ns2", labels={"tenant": "web"}, priority=-5)
    d = one(finding(K.QUOTA, tenant="ml", usage={"ns1/x": 1.0, "ns2/y": 1.0}),
            attribution(x, y, tenant_label="tenant"))
    assert d.request.pod == ref(x)
    culprit_only = finding(K.QUOTA, culprit=y, usage={"ns1/x": 1.0, "ns2/y": 1.0})  # tenant from the culprit's label
    assert one(culprit_only, attribution(x, y, tenant_label="tenant")).request.pod == ref(y)
    # A policy naming another label changes nothing the index does not say.
    relabelled = ActionPolicy(tenant_label="other")
    assert one(finding(K.QUOTA, tenant="ml", usage={"ns1/x": 1.0}), attribution(x, y, tenant_label="tenant"),
               relabelled).request.pod == ref(x)


def test_quota_tenant_from_culprit_and_unsafe_without_any():
    x = pod("x")
    assert one(finding(K.QUOTA, culprit=x, usage={"team-a/x": 1.0}), attribution(x)).request.pod == ref(x)
    assert one(finding(K.QUOTA, usage={"team-a/x": 1.0}), attribution(x)).result is R.UNSAFE


def test_quota_no_tenant_pods():
    assert one(finding(K.QUOTA, tenant="nobody"), attribution(pod("x"))).result is R.NO_CANDIDATE


# ------------------------------------------------------------------------------------------ unauthorized, xid


def test_unauthorized_evicts_the_offender_whatever_its_priority_below_the_floor():
    intruder, owner = pod("intruder", ns="b", priority=500), pod("owner", priority=10)
    d = one(finding(K.UNAUTHORIZED, culprit=intruder, victims=(owner,)), attribution(intruder, owner))
    assert d.request.pod == ref(intruder) and d.request.protects == ((ref(owner), 10),)


def test_unauthorized_without_pod_is_unsafe():
    assert one(finding(K.UNAUTHORIZED, culprit=None), attribution()).result is R.UNSAFE


def test_xid_is_report_only_by_default():
    x = pod("x")
    d = one(finding(K.XID, culprit=x), attribution(x))
    assert d.result is R.NO_CANDIDATE and "report only" in d.detail and d.request is None


def test_xid_drain_when_enabled():
    policy = ActionPolicy.model_validate({"xid": {"enabled": True, "drain_all": True}})
    x, y, z = pod("x"), pod("y"), pod("z", ns="kube-system")
    decisions = decide([finding(K.XID, culprit=x, victims=(y, z))], attribution(x, y, z), policy=policy, now=0.0)
    assert [(d.pod, d.result) for d in decisions] == [("x", None), ("y", None), ("z", R.PROTECTED)]
    policy = ActionPolicy.model_validate({"xid": {"enabled": True}})
    decisions = decide([finding(K.XID, culprit=None, victims=(y,))], attribution(x, y), policy=policy, now=0.0)
    assert [d.result for d in decisions] == [R.UNSAFE]


def test_disabled_kind_reports_why():
    policy = ActionPolicy.model_validate({"interference": {"enabled": False}})
    c, v = pod("c"), pod("v", priority=9)
    d = one(finding(culprit=c, victims=(v,)), attribution(c, v), policy)
    assert d.result is R.NO_CANDIDATE and "disabled" in d.detail


def test_one_decision_per_finding_in_order():
    c, v = pod("c"), pod("v", priority=9)
    fs = [finding(culprit=c, victims=(v,), key="k1"), finding(K.UNAUTHORIZED, culprit=None, key="k2")]
    assert [d.finding_key for d in decide(fs, attribution(c, v), policy=POLICY, now=0.0)] == ["k1", "k2"]


@pytest.mark.parametrize("kind", [K.QUOTA, K.INTERFERENCE, K.MEMORY_PRESSURE, K.UNAUTHORIZED])
def test_a_finding_below_critical_is_only_reported(kind):
    from watchdog.model import Severity

    batch, web = pod("batch", ns="b", priority=10), pod("web", priority=100)
    d = one(finding(kind, culprit=batch, victims=(web,), usage={"b/batch": 5.0}, needed=1.0,
                    severity=Severity.WARNING), attribution(batch, web))
    assert d.request is None and d.result is R.NO_CANDIDATE and "report only" in d.detail


@pytest.mark.parametrize("severity", ["warning", "critical"])
def test_a_full_mig_instance_is_never_an_eviction_reason(severity):
    """Not even a decision: nothing to count under evictions_total or to audit, whatever the severity."""
    from watchdog.model import Severity

    cache, serve = pod("cache", ns="b", priority=1), pod("serve", priority=100)
    full = finding(K.MIG_MEMORY_WARNING, key="mig-memory/MIG-1", culprit=cache, victims=(serve,),
                   usage={"b/cache": 9.0}, needed=1.0, tenant="b", severity=Severity(severity))
    quota = finding(K.QUOTA, key="quota/b/memory", culprit=cache, usage={"b/cache": 9.0}, needed=1.0, tenant="b")
    decisions = decide([full, quota], attribution(cache, serve), policy=POLICY, now=0.0)
    assert [d.finding_key for d in decisions] == ["quota/b/memory"]


# ------------------------------------------------------------------ kubelet order, shared with detection


def test_memory_pressure_ranks_by_use_above_request_not_absolute_use():
    a = pod("a", gpu_memory_request_bytes=10 * GiB)  # 15 GiB used: 5 GiB above its request
    b = pod("b", gpu_memory_request_bytes=None)  # 12 GiB used, no request: 12 GiB above
    v = pod("v", priority=100, gpu_memory_request_bytes=40 * GiB)
    usage = {"team-a/a": 15 * GiB, "team-a/b": 12 * GiB, "team-a/v": 30 * GiB}
    d = one(finding(K.MEMORY_PRESSURE, victims=(v,), usage=usage, needed=5 * GiB), attribution(a, b, v))
    assert d.request.pod.name == "b"


RANKING_TABLE = [
    # (name, priority, request GiB or None, use GiB)
    [("a", 0, 10, 15), ("b", 0, None, 12)],
    [("a", 5, None, 1), ("b", 0, 40, 20), ("c", 0, 4, 5)],  # above request first, whatever the priority
    [("a", 0, 8, 16), ("b", 0, 2, 9), ("c", 0, 8, 8)],  # excess 8 vs 7; c is not above its request
    [("a", 7, 1, 30), ("b", 3, 1, 2), ("c", 3, 1, 5)],  # lower priority first, then larger excess
    [("a", 0, 16, 10), ("b", 1, 16, 12), ("c", 0, 16, 14)],  # none above: priority, then nearer to the request
    [("a", 0, None, 0), ("b", 0, 0, 1), ("c", 2, None, 3)],  # a pod using nothing is not above a 0 request
]


@pytest.mark.parametrize("rows", RANKING_TABLE)
def test_decision_ranking_agrees_with_detections_relief_order(rows):
    from watchdog.detection.memory import relief_order  # test-only: the stages may not import each other

    pods = [pod(n, priority=p, gpu_memory_request_bytes=None if r is None else r * GiB) for n, p, r, _ in rows]
    usage = {f"team-a/{n}": float(u * GiB) for n, _, _, u in rows}
    detection = [r.name for r in relief_order(tuple(ref(p) for p in pods), usage, attribution(*pods))]
    ranked = sorted(pods, key=lambda p: relief_rank(usage[f"team-a/{p.name}"], p))
    assert [p.name for p in ranked] == detection
    # And decide takes the first of that order when it frees enough and protects a higher-priority victim.
    v = pod("v", priority=100)
    d = one(finding(K.MEMORY_PRESSURE, victims=(v,), usage=usage, needed=0.0), attribution(*pods, v))
    assert d.result is None and d.request.pod.name == detection[0]


# ------------------------------------------------------------------ replaced pods


def test_a_finding_about_an_old_pod_never_targets_its_same_name_replacement():
    old = pod("batch", ns="b", priority=1)
    new = replace(old, uid="uid-of-the-replacement")
    victim = pod("web", priority=100)
    attr = attribution(new, victim)
    assert attr.pod(ref(old)) is None
    assert attr.pod(PodRef("b", "batch")) is new  # a ref without uid still finds the pod by name
    assert attr.pod(ref(new)) is new
    d = one(finding(culprit=old, victims=(victim,)), attr)
    assert d.result is R.UNSAFE and "not in the pod cache" in d.detail


def test_a_finding_not_observed_this_tick_is_never_acted_on():
    import dataclasses

    batch, web = pod("batch", ns="b", priority=10), pod("web", priority=100)
    stale = dataclasses.replace(finding(culprit=batch, victims=(web,)), observed=False)
    d = one(stale, attribution(batch, web))
    assert d.request is None and d.result is R.UNSAFE and "not observed" in d.detail


# ------------------------------------------------------------------ quota without per-pod use


def test_quota_without_usage_is_unsafe_never_a_guess():
    """With no per-pod use nothing tells which pod frees the quota, so none is picked (a CPU-only pod least of all)."""
    cpu_only = pod("log-shipper", ns="batch")
    trainer = pod("trainer", ns="batch", priority=10, gpu_resources=("nvidia.com/gpu",))
    for needed in (None, 1.0):
        d = one(finding(K.QUOTA, tenant="batch", needed=needed), attribution(cpu_only, trainer))
        assert d.result is R.UNSAFE and d.request is None and "names no pod's use" in d.detail


def test_quota_candidates_must_use_the_resource():
    cpu_only = pod("log-shipper", ns="batch")  # lowest priority, but absent from the usage
    idle = pod("idle", ns="batch", priority=1)  # listed with 0 use
    trainer = pod("trainer", ns="batch", priority=10)
    usage = {"batch/idle": 0.0, "batch/trainer": 4.0}
    attr = attribution(cpu_only, idle, trainer)
    assert one(finding(K.QUOTA, tenant="batch", usage=usage), attr).request.pod == ref(trainer)
    assert one(finding(K.QUOTA, tenant="batch", usage=usage, needed=0.0), attr).request.pod == ref(trainer)
    d = one(finding(K.QUOTA, tenant="batch", usage={"batch/idle": 0.0}), attr)
    assert d.result is R.NOT_ENOUGH and d.request is None
