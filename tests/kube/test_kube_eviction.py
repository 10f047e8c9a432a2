"""KubeEvictions over real HTTP: every eviction answer, Events, the kill switch and pod listing."""

from __future__ import annotations

from datetime import datetime

import pytest

from watchdog.kube.client import KubeApi
from watchdog.kube.errors import KubeError, KubeRejected
from watchdog.kube.eviction import RBAC_EVICTION, KubeEvictions, classify_eviction
from watchdog.model import EvictionResult, PodRef


@pytest.fixture
def kube(api):
    return KubeEvictions(api, clock=lambda: 1_800_000_000.0)  # a whole second: microsecond == 0


def ref(pod: dict) -> PodRef:
    meta = pod["metadata"]
    return PodRef(meta["namespace"], meta["name"], meta["uid"])


async def test_success_is_evicted_and_starts_graceful_deletion(server, kube):
    pod = server.add_pod(namespace="ml", name="low", labels={"app": "train"})
    reply = await kube.evict(ref(pod), dry_run=False, grace_seconds=5)
    assert (reply.result, reply.http_status) == (EvictionResult.EVICTED, 201)
    stored = server.get_pod("ml", "low")
    assert stored["metadata"]["deletionTimestamp"] and stored["metadata"]["deletionGracePeriodSeconds"] == 5


async def test_dry_run_is_accepted_and_deletes_nothing(server, kube):
    pod = server.add_pod(namespace="ml", name="low")
    reply = await kube.evict(ref(pod), dry_run=True)
    assert (reply.result, reply.http_status) == (EvictionResult.DRY_RUN, 201)
    assert "deletionTimestamp" not in server.get_pod("ml", "low")["metadata"]
    method, path, query = server.requests[-1]
    assert (method, path, query) == ("POST", "/api/v1/namespaces/ml/pods/low/eviction", {"dryRun": "All"})


async def test_pdb_with_max_unavailable_zero_blocks(server, kube):
    pod = server.add_pod(namespace="ml", name="low", labels={"app": "train"})
    server.add_pdb(namespace="ml", name="keep", selector={"app": "train"}, max_unavailable=0)
    for dry_run in (True, False):  # the PDB check runs in a dry run too
        reply = await kube.evict(ref(pod), dry_run=dry_run)
        assert (reply.result, reply.http_status, reply.retry_after) == (EvictionResult.BLOCKED_PDB, 429, None)
        assert "disruption budget" in reply.message and "keep" in reply.message
    assert "deletionTimestamp" not in server.get_pod("ml", "low")["metadata"]


async def test_unobserved_pdb_blocks_with_retry_after(server, kube):
    pod = server.add_pod(namespace="ml", name="low", labels={"app": "train"})
    server.add_pdb(namespace="ml", name="new", selector={"app": "train"}, max_unavailable=1, observed=False)
    reply = await kube.evict(ref(pod), dry_run=False)
    assert (reply.result, reply.retry_after) == (EvictionResult.BLOCKED_PDB, 10.0)


async def test_two_matching_pdbs_are_a_2xx_failure_and_blocked(server, kube):
    pod = server.add_pod(namespace="ml", name="low", labels={"app": "train", "tier": "batch"})
    server.add_pdb(namespace="ml", name="one", selector={"app": "train"}, max_unavailable=1)
    server.add_pdb(namespace="ml", name="two", selector={"tier": "batch"}, max_unavailable=1)
    reply = await kube.evict(ref(pod), dry_run=False)
    assert (reply.result, reply.http_status) == (EvictionResult.BLOCKED, 201)
    assert "more than one PodDisruptionBudget" in reply.message
    assert "deletionTimestamp" not in server.get_pod("ml", "low")["metadata"]


def test_multi_pdb_refusal_as_documented_500_is_blocked_too():
    body = {"kind": "Status", "status": "Failure", "code": 500,
            "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}
    assert classify_eviction(500, body, dry_run=False).result is EvictionResult.BLOCKED
    assert classify_eviction(500, {"message": "etcd down"}, dry_run=False).result is EvictionResult.ERROR


def test_only_a_disruption_budget_cause_makes_a_429_a_pdb_refusal():
    pdb = {"kind": "Status", "status": "Failure", "code": 429, "reason": "TooManyRequests",
           "message": "Cannot evict pod as it would violate the pod's disruption budget.",
           "details": {"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget keep needs 1"}]}}
    reply = classify_eviction(429, pdb, dry_run=False)
    assert (reply.result, reply.retry_after) == (EvictionResult.BLOCKED_PDB, None) and "keep needs 1" in reply.message
    # API Priority and Fairness: 429, Retry-After, no causes (apiserver filters/priority-and-fairness.go).
    apf = {"kind": "Status", "status": "Failure", "code": 429, "reason": "TooManyRequests",
           "message": "Too many requests, please try again later.", "details": {"retryAfterSeconds": 1}}
    reply = classify_eviction(429, apf, dry_run=False, headers={"Retry-After": "7"})
    assert (reply.result, reply.http_status, reply.retry_after) == (EvictionResult.RATE_LIMITED, 429, 7.0)
    assert "throttled" in reply.message
    reply = classify_eviction(429, apf, dry_run=True)
    assert (reply.result, reply.retry_after) == (EvictionResult.RATE_LIMITED, 1.0)
    other_cause = {"details": {"causes": [{"reason": "FieldValueInvalid", "message": "x"}]}}
    assert classify_eviction(429, other_cause, dry_run=False).result is EvictionResult.RATE_LIMITED
    assert classify_eviction(429, {}, dry_run=False).result is EvictionResult.RATE_LIMITED


async def test_throttled_eviction_over_http_is_rate_limited(server, kube):
    pod = server.add_pod(namespace="ml", name="low")
    server.fail_next(1, status=429, path_prefix="/api/v1/namespaces/ml/pods/low/eviction")
    reply = await kube.evict(ref(pod), dry_run=False)
    assert (reply.result, reply.http_status) == (EvictionResult.RATE_LIMITED, 429)
    assert "deletionTimestamp" not in server.get_pod("ml", "low")["metadata"]


async def test_missing_pod_is_gone(kube):
    reply = await kube.evict(PodRef("ml", "ghost"), dry_run=False)
    assert (reply.result, reply.http_status) == (EvictionResult.GONE, 404)


async def test_replaced_pod_is_gone_not_evicted(server, kube):
    server.add_pod(namespace="ml", name="low")
    reply = await kube.evict(PodRef("ml", "low", uid="uid-of-an-older-pod"), dry_run=False)
    assert (reply.result, reply.http_status) == (EvictionResult.GONE, 409)
    assert "deletionTimestamp" not in server.get_pod("ml", "low")["metadata"]


async def test_forbidden_names_the_rbac_rule(server, kube):
    pod = server.add_pod(namespace="ml", name="low")
    server.fail_next(1, status=403, path_prefix="/api/v1/namespaces/ml/pods/low/eviction")
    reply = await kube.evict(ref(pod), dry_run=False)
    assert (reply.result, reply.http_status) == (EvictionResult.ERROR, 403)
    assert reply.message.startswith(RBAC_EVICTION)
    assert 'cannot create resource "pods/eviction"' in reply.message


def test_an_admission_policy_denial_is_blocked_not_an_api_failure():
    """deploy/admission-policy.yaml refusing a pod (its namespace did not opt in) is the cluster's answer about that
    pod: BLOCKED, backed off per pod, not an ERROR that holds every send of the node. The message is the API
    server's (apiserver pkg/admission/plugin/policy/validating/dispatcher.go, admission.NewForbidden)."""
    message = ('pods "batch-0" is forbidden: ValidatingAdmissionPolicy \'gpu-watchdog-evictions\' with binding '
               '\'gpu-watchdog-evictions\' denied request: gpu-watchdog may not evict in namespace team-b: it does '
               'not carry the label gpu-watchdog.io/evictable="true"')
    for status in (403, 422):  # Forbidden as the policy sets it; Invalid when a validation names no reason
        reply = classify_eviction(status, {"kind": "Status", "status": "Failure", "message": message,
                                           "reason": "Forbidden"}, dry_run=True)
        assert reply.result is EvictionResult.BLOCKED and "admission policy" in reply.message
        assert "team-b" in reply.message
    rbac = classify_eviction(403, {"message": 'pods "x" is forbidden: User "u" cannot create resource'},
                             dry_run=False)
    assert rbac.result is EvictionResult.ERROR and rbac.message.startswith(RBAC_EVICTION)


async def test_server_error_is_error(server, kube):
    pod = server.add_pod(namespace="ml", name="low")
    server.fail_next(1, status=500)
    reply = await kube.evict(ref(pod), dry_run=False)
    assert (reply.result, reply.http_status) == (EvictionResult.ERROR, 500)


async def test_timeout_and_unreachable_are_errors_without_status(server):
    pod = server.add_pod(namespace="ml", name="low")
    server.delay(2.0)
    async with KubeApi.from_url(server.url, timeout=0.2) as impatient:
        reply = await KubeEvictions(impatient).evict(ref(pod), dry_run=False)
    assert (reply.result, reply.http_status) == (EvictionResult.ERROR, None)
    assert "timed out" in reply.message
    server.delay(0)
    async with KubeApi.from_url("http://127.0.0.1:9", timeout=1) as unreachable:
        reply = await KubeEvictions(unreachable).evict(ref(pod), dry_run=False)
    assert (reply.result, reply.http_status) == (EvictionResult.ERROR, None)


async def test_pending_pod_skips_the_pdb(server, kube):
    pod = server.add_pod(namespace="ml", name="waiting", labels={"app": "train"}, phase="Pending", ready=False)
    server.add_pdb(namespace="ml", name="keep", selector={"app": "train"}, max_unavailable=0)
    reply = await kube.evict(ref(pod), dry_run=False)
    assert reply.result is EvictionResult.EVICTED


async def test_event_is_recorded_with_aware_timestamps(server, kube):
    pod = server.add_pod(namespace="ml", name="low")
    assert await kube.record_event(ref(pod), reason="GpuWatchdogEvicted", message="interference on GPU-1",
                                   host="node-1") is True
    [event] = server.objects("events", "ml")
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "low", "namespace": "ml",
                                       "uid": pod["metadata"]["uid"]}
    assert (event["reason"], event["type"], event["action"]) == ("GpuWatchdogEvicted", "Warning", "Evict")
    assert event["source"] == {"component": "gpu-watchdog", "host": "node-1"}
    for field in ("firstTimestamp", "lastTimestamp"):
        moment = datetime.fromisoformat(event[field].replace("Z", "+00:00"))
        assert moment.tzinfo is not None and moment.timestamp() == 1_800_000_000.0


async def test_event_failure_returns_false(server, kube):
    server.fail_next(1, status=403)
    assert await kube.record_event(PodRef("ml", "low"), reason="X", message="y") is False


async def test_the_api_refuses_naive_timestamps(api):
    body = {"metadata": {"name": "naive", "namespace": "ml"}, "involvedObject": {"kind": "Pod", "name": "p"},
            "firstTimestamp": "2026-01-01T00:00:00", "reason": "X"}
    with pytest.raises(KubeRejected) as caught:
        await api.request_json("POST", "/api/v1/namespaces/ml/events", body=body)
    assert caught.value.status == 400


async def test_kill_switch(server, kube):
    assert await kube.read_kill_switch("gpu-watchdog", "switch") is False  # absent ConfigMap
    server.set_config_map("gpu-watchdog", "switch", {"paused": "true"})
    assert await kube.read_kill_switch("gpu-watchdog", "switch") is True
    server.set_config_map("gpu-watchdog", "switch", {"paused": "False"})
    assert await kube.read_kill_switch("gpu-watchdog", "switch") is False
    server.set_config_map("gpu-watchdog", "switch", {"other": "true"})
    assert await kube.read_kill_switch("gpu-watchdog", "switch") is False
    assert await kube.read_kill_switch("gpu-watchdog", "switch", key="other") is True
    server.fail_next(1, status=503)
    assert await kube.read_kill_switch("gpu-watchdog", "switch") is None


async def test_list_pods_with_selectors(server, kube):
    server.add_pod(namespace="ml", name="a", labels={"tenant": "ml", "prio": "low"}, node="n1")
    server.add_pod(namespace="ml", name="b", labels={"tenant": "ml", "prio": "high"}, node="n2")
    server.add_pod(namespace="cv", name="c", labels={"tenant": "cv"}, node="n1")
    names = lambda pods: sorted(p.name for p in pods)  # noqa: E731
    assert names(await kube.list_pods(label_selector="tenant=ml")) == ["a", "b"]
    assert names(await kube.list_pods(label_selector="tenant in (ml,cv),prio!=high")) == ["a", "c"]
    assert names(await kube.list_pods(label_selector="!prio")) == ["c"]
    assert names(await kube.list_pods(field_selector="spec.nodeName=n1", namespace="ml")) == ["a"]
    with pytest.raises(KubeError):
        await kube.list_pods(field_selector="spec.bogus=1")


async def test_observe_style_use_sends_nothing(server):
    async with KubeApi.from_url(server.url):
        pass
    assert server.requests == []
