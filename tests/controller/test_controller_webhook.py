"""Webhook parsing, alert selection, dedupe and the pod an alert points at — all pure."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from controller_payloads import alert, body, payload
from watchdog.config.action import ActionPolicy
from watchdog.controller.selection import decide_alert, is_gpu_pod
from watchdog.controller.webhook import Deduper, WebhookError, parse_payload, select_targets
from watchdog.model import EvictionResult as R
from watchdog.model import FindingKind, PodInfo


STARTS_AT = datetime(2026, 11, 30, 10, 0, tzinfo=timezone.utc).timestamp()  # controller_payloads' startsAt


def gpu_pod(name: str, *, ns: str = "team-b", priority: int = 0, created: float = 0.0, res="nvidia.com/gpu", **kw):
    kw.setdefault("node", "node-1")  # scheduled and Running (PodInfo's default phase): it holds its GPU
    return PodInfo(uid=f"u-{name}", namespace=ns, name=name, priority=priority, created=created,
                   gpu_resources=(res,) if res else (), **kw)


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[]", "JSON object"),
        (body(alert(), version="3"), "unsupported webhook version '3'"),
        (json.dumps({"version": "4"}).encode(), "'alerts' must be a list"),
        (json.dumps({"version": "4", "alerts": [1]}).encode(), "alerts[0] must be an object"),
        (json.dumps(payload({**alert(), "status": "weird"})).encode(), "alerts[0].status"),
        (json.dumps(payload({**alert(), "labels": {"a": 1}})).encode(), "alerts[0].labels"),
        (json.dumps(payload({**alert(), "fingerprint": ""})).encode(), "alerts[0].fingerprint"),
        (json.dumps(payload({k: v for k, v in alert().items() if k != "startsAt"})).encode(), "startsAt"),
        (body(alert(starts_at="yesterday")), "alerts[0].startsAt must be an RFC 3339 time"),
        (body(alert(starts_at="2026-11-30T10:00:00")), "alerts[0].startsAt must be an RFC 3339 time"),
    ],
)
def test_malformed_payloads_are_refused_with_a_reason(raw, words):
    with pytest.raises(WebhookError) as caught:
        parse_payload(raw)
    assert words in caught.value.reason
    assert isinstance(caught.value, ValueError)


def test_selects_firing_evict_alerts_only():
    targets, skipped = select_targets(
        parse_payload(
            body(
                alert(fingerprint="a"),
                alert(fingerprint="b", status="resolved"),
                alert(fingerprint="c", action=None),
                alert(fingerprint="d", namespace=None),
                alert(fingerprint="e", pod=None, kind="interference"),
                alert(fingerprint="f", action="page"),
            )
        )
    )
    assert [(t.fingerprint, t.namespace, t.pod) for t in targets] == [("a", "team-b", "batch"), ("e", "team-b", None)]
    assert targets[0].kind is FindingKind.QUOTA and targets[1].kind is FindingKind.INTERFERENCE
    assert targets[0].dedupe_key == ("a", "2026-11-30T10:00:00Z")
    assert targets[0].finding_key == "alert/GpuWatchdogQuotaBreach/a"
    assert len(skipped) == 4 and any("resolved" in s for s in skipped)


def test_deduper_is_bounded():
    d = Deduper(capacity=2)
    d.remember(("a", "t"), "evicted")
    d.remember(("b", "t"), "evicted")
    d.remember(("c", "t"), "gone")
    assert d.seen(("a", "t")) is None and d.seen(("c", "t")) == "gone" and len(d) == 2


def target(**kw):
    targets, _ = select_targets(parse_payload(body(alert(**kw))))
    return targets[0]


def test_named_pod_goes_through_the_same_refusals():
    policy = ActionPolicy()
    assert decide_alert(target(), [gpu_pod("batch")], policy=policy).result is None
    assert decide_alert(target(), [gpu_pod("batch", priority=2_000_000_000)], policy=policy).result is R.PROTECTED
    assert decide_alert(target(), [gpu_pod("batch", owner_kind="DaemonSet")], policy=policy).result is R.PROTECTED
    assert decide_alert(target(), [gpu_pod("batch", deleting=True)], policy=policy).result is R.ALREADY_EVICTED
    assert decide_alert(target(), [], policy=policy).result is R.GONE
    kube_system = target(namespace="kube-system")
    d = decide_alert(kube_system, [gpu_pod("batch", ns="kube-system")], policy=policy)
    assert d.result is R.PROTECTED and d.request.reason == "alert"


def test_namespace_only_picks_lowest_priority_gpu_pod_youngest_first():
    policy = ActionPolicy()
    pods = [
        gpu_pod("cpu-only", priority=-100, res=None),
        gpu_pod("old", priority=0, created=10.0),
        gpu_pod("young", priority=0, created=20.0),
        gpu_pod("mig", priority=5, res="nvidia.com/mig-1g.10gb"),
        gpu_pod("elsewhere", ns="other", priority=-50),
    ]
    d = decide_alert(target(pod=None), pods, policy=policy)
    assert (d.pod, d.result) == ("young", None) and d.request.evidence["fingerprint"] == "f00d"
    guarded = [gpu_pod("g", priority=-1, annotations={"gpu-watchdog.io/protected": "true"}), gpu_pod("x")]
    assert decide_alert(target(pod=None), guarded, policy=policy).pod == "x"
    assert decide_alert(target(pod=None), guarded[:1], policy=policy).result is R.PROTECTED
    assert decide_alert(target(pod=None), [gpu_pod("c", res=None)], policy=policy).result is R.NO_CANDIDATE
    assert is_gpu_pod(gpu_pod("m", res="nvidia.com/mig-3g.40gb")) and not is_gpu_pod(gpu_pod("n", res="cpu"))


def test_named_pod_must_be_a_gpu_pod():
    d = decide_alert(target(), [gpu_pod("batch", res=None), gpu_pod("gpu-job")], policy=ActionPolicy())
    assert (d.result, d.pod, d.request) == (R.NO_CANDIDATE, "batch", None) and "no GPU" in d.detail


def test_named_pod_is_refused_while_the_tenant_has_a_lower_priority_gpu_pod():
    policy = ActionPolicy()
    named = gpu_pod("batch", priority=100)
    d = decide_alert(target(), [named, gpu_pod("low", priority=5), gpu_pod("cpu", priority=-9, res=None)], policy=policy)
    assert d.result is R.NOT_LOWER_PRIORITY and d.pod == "batch" and "team-b/low" in d.detail
    # Lower-priority pods that may not be evicted (protected, terminating, other tenant) do not count.
    others = [
        gpu_pod("guarded", priority=1, annotations={"gpu-watchdog.io/protected": "true"}),
        gpu_pod("leaving", priority=1, deleting=True),
        gpu_pod("elsewhere", ns="team-c", priority=1),
        gpu_pod("peer", priority=100),
    ]
    assert decide_alert(target(), [named, *others], policy=policy).result is None


def test_namespace_only_evicts_nothing_while_a_tenant_gpu_pod_is_terminating():
    policy = ActionPolicy()
    pods = [gpu_pod("evicted-before", priority=0, deleting=True), gpu_pod("next", priority=0)]
    d = decide_alert(target(pod=None), pods, policy=policy)
    assert (d.result, d.pod) == (R.ALREADY_EVICTED, "evicted-before")
    # A terminating pod that holds no GPU, or in another namespace, does not stop it.
    pods = [gpu_pod("cpu", deleting=True, res=None), gpu_pod("other", ns="x", deleting=True), gpu_pod("next")]
    assert decide_alert(target(pod=None), pods, policy=policy).pod == "next"


def test_only_running_scheduled_pods_are_candidates():
    # A Pending pod holds no GPU, and eviction.go deletes a Pending pod without any PodDisruptionBudget check.
    policy = ActionPolicy()
    running = gpu_pod("running", created=10.0)
    queued = gpu_pod("queued", created=20.0, phase="Pending", node="")
    bound_not_started = gpu_pod("starting", created=30.0, phase="Pending")
    no_node = gpu_pod("no-node", created=40.0, node="")
    d = decide_alert(target(pod=None), [running, queued, bound_not_started, no_node], policy=policy)
    assert (d.pod, d.result) == ("running", None)
    d = decide_alert(target(pod=None), [queued, bound_not_started], policy=policy)
    assert (d.result, d.request) == (R.NO_CANDIDATE, None)
    for pending in (queued, bound_not_started, no_node):
        d = decide_alert(target(pod=pending.name), [pending, running], policy=policy)
        assert (d.result, d.pod, d.request) == (R.NO_CANDIDATE, pending.name, None), pending.name
        assert "Running" in d.detail
    # A lower-priority Pending pod frees nothing: it does not stop the named pod.
    named = gpu_pod("batch", priority=100)
    assert decide_alert(target(), [named, gpu_pod("low", priority=5, phase="Pending", node="")],
                        policy=policy).result is None


def test_pods_created_after_the_alert_started_are_not_what_it_is_about():
    policy = ActionPolicy()
    old = gpu_pod("old", created=STARTS_AT - 3600)
    replacement = gpu_pod("replacement", created=STARTS_AT + 60)  # e.g. its ReplicaSet's answer to an eviction
    d = decide_alert(target(pod=None), [old, replacement], policy=policy)
    assert (d.pod, d.result) == ("old", None)
    d = decide_alert(target(pod=None), [replacement], policy=policy)
    assert (d.result, d.request) == (R.NO_CANDIDATE, None) and "startsAt" in d.detail
    d = decide_alert(target(pod="replacement"), [replacement, old], policy=policy)
    assert (d.result, d.request) == (R.NO_CANDIDATE, None) and "startsAt" in d.detail
    assert decide_alert(target(pod="old"), [old], policy=policy).result is None
