"""The floor of protections no policy can remove, on every path that may evict.

The policy under test is the weakest that validation lets through: no protected namespace, a priority floor at
system-cluster-critical, another protection annotation, enforce. Under it the agent's rules, the
controller's alert selection and the evictor's send-time re-check must still refuse every floor case.
"""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
from pydantic import ValidationError

from action_builders import attribution, finding, pod, warmed_stage
from watchdog.action import AuditLog, decide, effective_policy, protection, refusal
from watchdog.action.floor import FLOOR_NAMESPACES, SYSTEM_NODE_CRITICAL, PROJECT_NAMESPACE, review
from watchdog.config import Settings
from watchdog.config.action import SYSTEM_CLUSTER_CRITICAL, ActionPolicy
from watchdog.controller.selection import decide_alert
from watchdog.controller.webhook import AlertTarget
from watchdog.model import EvictionResult as R
from watchdog.model import FindingKind as K
from watchdog.model import PodInfo

WEAKEST = ActionPolicy.model_validate({
    "mode": "enforce",
    "protected_namespaces": [],
    "priority_floor": SYSTEM_CLUSTER_CRITICAL,
    "protected_annotation": "example.com/keep",
    "interference": {"for_seconds": 0},
    "unauthorized": {"for_seconds": 0},
    "xid": {"enabled": True, "for_seconds": 0},
})

FLOOR_CASES = [
    (pod("c", ns="kube-system"), R.PROTECTED, "namespace kube-system"),
    (pod("c", ns=PROJECT_NAMESPACE), R.PROTECTED, f"namespace {PROJECT_NAMESPACE}"),
    (pod("c", ns="gpu-watchdog-controller"), R.PROTECTED, "namespace gpu-watchdog-controller"),
    (pod("c", ns="kube-public"), R.PROTECTED, "namespace kube-public"),
    (pod("c", ns="kube-flannel"), R.PROTECTED, "namespace kube-flannel"),  # kube-* is reserved for Kubernetes
    (pod("c", priority=SYSTEM_CLUSTER_CRITICAL), R.PROTECTED, "system-cluster-critical"),
    (pod("c", priority=SYSTEM_NODE_CRITICAL), R.PROTECTED, "system-cluster-critical"),
    (pod("c", annotations={"gpu-watchdog.io/protected": "true"}), R.PROTECTED, "annotated gpu-watchdog.io/protected"),
    (pod("c", owner_kind="DaemonSet"), R.PROTECTED, "DaemonSet"),
    (pod("c", owner_kind="Node"), R.PROTECTED, "static"),
    (pod("c", annotations={"kubernetes.io/config.mirror": "abc"}), R.PROTECTED, "static"),
    (pod("c", mirror=True), R.PROTECTED, "static"),
    (pod("c", deleting=True), R.ALREADY_EVICTED, "terminating"),
    (pod("c", phase="Succeeded"), R.GONE, "ended"),
]


def test_a_priority_floor_above_system_cluster_critical_is_refused_naming_the_field():
    with pytest.raises(ValidationError) as err:
        ActionPolicy.model_validate({"protected_namespaces": [], "priority_floor": 3_000_000_000})
    assert err.value.errors()[0]["loc"] == ("priority_floor",)
    assert "system-cluster-critical" in str(err.value)


@pytest.mark.parametrize(("culprit", "expected", "words"), FLOOR_CASES)
@pytest.mark.parametrize("kind", [K.INTERFERENCE, K.UNAUTHORIZED, K.XID])
def test_the_agent_rules_never_evict_the_floor_under_the_weakest_policy(culprit, expected, words, kind):
    victim = pod("v", ns="v", priority=SYSTEM_CLUSTER_CRITICAL - 1)
    [d] = decide([finding(kind, culprit=culprit, victims=(victim,))], attribution(culprit, victim),
                 policy=WEAKEST, now=0.0)
    assert d.result is expected and words in d.detail


@pytest.mark.parametrize(("culprit", "expected", "words"), FLOOR_CASES)
def test_memory_pressure_and_quota_never_pick_the_floor(culprit, expected, words):
    victim = pod("v", ns="v", priority=SYSTEM_CLUSTER_CRITICAL - 1)
    usage = {f"{culprit.namespace}/{culprit.name}": 10.0}
    for f in (finding(K.MEMORY_PRESSURE, victims=(victim,), usage=usage, needed=1.0),
              finding(K.QUOTA, tenant=culprit.namespace, usage=usage)):
        [d] = decide([f], attribution(culprit, victim), policy=WEAKEST, now=0.0)
        assert d.result is not None, f.kind


@pytest.mark.parametrize(("target", "expected", "words"), FLOOR_CASES)
def test_the_controller_never_evicts_the_floor_under_the_weakest_policy(target, expected, words):
    gpu_pod = replace(target, gpu_resources=("nvidia.com/gpu",))
    named = AlertTarget(fingerprint="f", starts_at="2099-01-01T00:00:00Z", alertname="TenantOverQuota",
                        namespace=gpu_pod.namespace, pod=gpu_pod.name, kind=K.QUOTA, node=gpu_pod.node)
    decision = decide_alert(named, [gpu_pod], policy=WEAKEST)
    assert decision.result is expected and words in decision.detail
    assert decide_alert(replace(named, pod=None), [gpu_pod], policy=WEAKEST).result is not None  # nobody goes


@pytest.mark.parametrize(("target", "expected", "words"), FLOOR_CASES)
def test_the_shared_refusal_holds_the_floor(target, expected, words):
    refused = refusal(target, WEAKEST)
    assert refused is not None and refused.result is expected and words in refused.detail


def test_the_send_time_check_from_the_request_alone_holds_the_floor():
    for namespace in FLOOR_NAMESPACES:
        assert protection(PodInfo(uid="u", namespace=namespace, name="x"), WEAKEST)
    assert protection(PodInfo(uid="u", namespace="team-a", name="x", priority=SYSTEM_NODE_CRITICAL), WEAKEST)
    assert protection(PodInfo(uid="u", namespace="team-a", name="x", priority=SYSTEM_CLUSTER_CRITICAL - 1),
                      WEAKEST) is None


async def test_the_evictor_re_reads_and_refuses_a_pod_that_joined_the_floor():
    # The cache said an ordinary pod; the API server's copy, read right before the send, carries the project's
    # protection annotation now, which the policy (its own annotation is another) cannot switch off.
    class Api:
        sent: list = []

        async def get_pod(self, namespace, name):
            return PodInfo(uid=f"uid-{namespace}-{name}", namespace=namespace, name=name,
                           annotations={"gpu-watchdog.io/protected": "true"})

        async def evict(self, p, *, dry_run, grace_seconds=None):
            self.sent.append(p.key)

        async def record_event(self, p, **fields):
            return True

    api = Api()
    stage, _ = warmed_stage(WEAKEST, now=600.0, warm_up=600.0, api=api, audit=AuditLog(stream=io.StringIO()),
                            node="n", kill_switch=None)  # the start-empty bucket has refilled
    culprit, victim = pod("hog", ns="b"), pod("v", ns="a", priority=100)
    outcomes = (await stage.run_cycle([finding(culprit=culprit, victims=(victim,))],
                                      attribution(culprit, victim))).outcomes
    assert [o.result for o in outcomes] == [R.PROTECTED] and "gpu-watchdog.io/protected" in outcomes[0].detail
    assert api.sent == []


def test_an_agent_elsewhere_protects_its_own_namespace_after_every_load():
    policy = effective_policy(WEAKEST, own_namespace="ops-gpu", tenant_label=None)
    c, v = pod("c", ns="ops-gpu"), pod("v", priority=100)
    [d] = decide([finding(culprit=c, victims=(v,))], attribution(c, v), policy=policy, now=0.0)
    assert d.result is R.PROTECTED and "namespace ops-gpu" in d.detail


def test_the_project_namespace_is_the_default_agent_namespace():
    assert Settings().namespace == PROJECT_NAMESPACE


# ----------------------------------------------------------------------------------------- dangerous values


def fields(policy: dict) -> list[str]:
    return [c.field for c in review(ActionPolicy.model_validate(policy))]


def test_the_safe_defaults_raise_no_caution():
    assert fields({}) == []
    assert fields({"mode": "enforce", "protected_namespaces": ["kube-system", "monitoring"]}) == []


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"mode": "enforce", "protected_namespaces": []}, "protected_namespaces"),
        ({"mode": "enforce", "protected_namespaces": ["kube-system", PROJECT_NAMESPACE]}, "protected_namespaces"),
        ({"priority_floor": 1_000_000_001}, "priority_floor"),
        ({"priority_floor": SYSTEM_CLUSTER_CRITICAL}, "priority_floor"),
        ({"node_eviction_burst": 11}, "node_eviction_burst"),
        ({"pod_cooldown_seconds": 0}, "pod_cooldown_seconds"),
        ({"tenant_cooldown_seconds": 0}, "tenant_cooldown_seconds"),
    ],
)
def test_each_dangerous_value_is_named(policy, field):
    assert fields(policy) == [field]


def test_dry_run_with_no_protected_namespace_is_no_caution():
    assert fields({"mode": "dry-run", "protected_namespaces": []}) == []
