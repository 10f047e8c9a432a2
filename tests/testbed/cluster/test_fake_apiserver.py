"""The fake API server behaves like Kubernetes where the watchdog depends on it (official client over HTTP)."""

from __future__ import annotations

import json

import aiohttp
import pytest
from kubernetes.aio import client as k8s

from tests.fake_api import FakeApi
from watchdog.kube.errors import KubeConflict, KubeForbidden, KubeRejected


async def watch_lines(url: str, *, count: int, **query) -> list[dict]:
    """Open a raw watch and read ``count`` events (or until the stream ends)."""
    params = {"watch": "True", **{k: str(v) for k, v in query.items()}}  # "True": parsed case-insensitively
    events = []
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{url}/api/v1/pods", params=params, timeout=aiohttp.ClientTimeout(total=5)) as resp:
            assert resp.status == 200
            while len(events) < count:
                line = await resp.content.readline()
                if not line:
                    break
                events.append(json.loads(line))
    return events


async def test_objects_get_uid_timestamp_and_a_global_resource_version(server, api):
    pod = server.add_pod(namespace="ml", name="a")
    config_map = server.set_config_map("ml", "cm", {"k": "v"})
    assert pod["metadata"]["uid"] and pod["metadata"]["creationTimestamp"].endswith("Z")
    assert int(config_map["metadata"]["resourceVersion"]) == int(pod["metadata"]["resourceVersion"]) + 1
    listed = await api.core.list_namespaced_pod("ml")
    assert listed.metadata.resource_version == config_map["metadata"]["resourceVersion"]


async def test_create_pod_applies_priority_admission(server, api):
    server.add_priority_class("batch-low", 100)
    body = {"metadata": {"name": "p"}, "spec": {"priorityClassName": "batch-low", "containers": [{"name": "c"}]}}
    created = await api.request_json("POST", "/api/v1/namespaces/ml/pods", body=body)
    assert (created["spec"]["priority"], created["status"]["phase"]) == (100, "Pending")
    assert created["status"]["qosClass"] == "BestEffort"
    with pytest.raises(KubeConflict):
        await api.request_json("POST", "/api/v1/namespaces/ml/pods", body=body)
    missing = {"metadata": {"name": "q"}, "spec": {"priorityClassName": "nope", "containers": [{"name": "c"}]}}
    with pytest.raises(KubeForbidden, match="no PriorityClass"):
        await api.request_json("POST", "/api/v1/namespaces/ml/pods", body=missing)


async def test_selectors(server, api):
    server.add_pod(namespace="ml", name="a", labels={"app": "x", "tier": "gpu"}, node="n1")
    server.add_pod(namespace="ml", name="b", labels={"app": "y"}, node="n2", phase="Pending", ready=False)
    server.add_pod(namespace="cv", name="c", labels={"app": "z"}, node="n1")

    async def names(**query):
        return sorted(p.metadata.name for p in (await api.core.list_pod_for_all_namespaces(**query)).items)

    assert await names(label_selector="app=x") == ["a"]
    assert await names(label_selector="app==x") == ["a"]
    assert await names(label_selector="app!=x") == ["b", "c"]
    assert await names(label_selector="app in (x, z)") == ["a", "c"]
    assert await names(label_selector="app notin (x)") == ["b", "c"]
    assert await names(label_selector="tier") == ["a"]
    assert await names(label_selector="!tier,app") == ["b", "c"]
    assert await names(field_selector="spec.nodeName=n1") == ["a", "c"]
    assert await names(field_selector="status.phase=Pending") == ["b"]
    assert await names(field_selector="metadata.namespace!=ml") == ["c"]
    assert await names(field_selector="metadata.name=a,spec.nodeName=n1") == ["a"]
    with pytest.raises(k8s.ApiException) as caught:
        await api.core.list_pod_for_all_namespaces(field_selector="spec.schedulerName=x")
    assert caught.value.status == 400
    with pytest.raises(k8s.ApiException):
        await api.core.list_pod_for_all_namespaces(label_selector="app in ()")


async def test_watch_replays_from_a_version_and_410s_when_too_old(server):
    first = server.add_pod(namespace="ml", name="a")
    server.add_pod(namespace="ml", name="b")
    events = await watch_lines(server.url, count=1, resourceVersion=first["metadata"]["resourceVersion"])
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "b")]
    initial = await watch_lines(server.url, count=2, resourceVersion=0)
    assert sorted(e["object"]["metadata"]["name"] for e in initial) == ["a", "b"]
    server.expire_history()
    [error] = await watch_lines(server.url, count=5, resourceVersion=first["metadata"]["resourceVersion"])
    assert error["type"] == "ERROR"
    assert (error["object"]["code"], error["object"]["reason"]) == (410, "Expired")
    assert "too old resource version" in error["object"]["message"]


async def test_watch_timeout_and_periodic_bookmarks(fake_api: FakeApi):
    server = await fake_api.server(bookmark_interval=0.05)
    server.add_pod(namespace="ml", name="a")
    events = await watch_lines(server.url, count=3, resourceVersion=server.resource_version,
                               allowWatchBookmarks="true", timeoutSeconds=1)
    assert [e["type"] for e in events] == ["BOOKMARK"] * 3
    assert events[0]["object"]["metadata"] == {"resourceVersion": server.resource_version}
    ended = await watch_lines(server.url, count=100, resourceVersion=server.resource_version, timeoutSeconds=1)
    assert ended == []  # no bookmarks unless asked; the stream ends at timeoutSeconds


async def test_label_filtered_watch_sees_a_relabel_as_deleted(server, api):
    server.add_pod(namespace="ml", name="a", labels={"app": "x"})
    version = server.resource_version
    await api.core.patch_namespaced_pod("a", "ml", {"metadata": {"labels": {"app": "other"}}})
    [event] = await watch_lines(server.url, count=1, resourceVersion=version, labelSelector="app=x")
    assert (event["type"], event["object"]["metadata"]["labels"]) == ("DELETED", {"app": "x"})


async def test_graceful_and_immediate_deletion(server, api):
    server.add_pod(namespace="ml", name="slow")
    server.add_pod(namespace="ml", name="fast")
    version = server.resource_version
    await api.core.delete_namespaced_pod("slow", "ml", grace_period_seconds=30)
    await api.core.delete_namespaced_pod("fast", "ml", grace_period_seconds=0)
    assert server.get_pod("ml", "slow")["metadata"]["deletionGracePeriodSeconds"] == 30
    assert server.get_pod("ml", "fast") is None
    server.finish_deletions()
    events = await watch_lines(server.url, count=3, resourceVersion=version)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("MODIFIED", "slow"), ("DELETED", "fast"), ("DELETED", "slow")]


async def test_instant_deletes(fake_api: FakeApi):
    server = await fake_api.server(instant_deletes=True)
    server.add_pod(namespace="ml", name="a")
    async with aiohttp.ClientSession() as session:
        async with session.delete(f"{server.url}/api/v1/namespaces/ml/pods/a") as resp:
            assert resp.status == 200
    assert server.get_pod("ml", "a") is None


async def eviction(server, name, *, body_name=None, query="", delete_options=None):
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": body_name or name, "namespace": "ml"},
            "deleteOptions": delete_options or {}}
    async with aiohttp.ClientSession() as session:
        url = f"{server.url}/api/v1/namespaces/ml/pods/{name}/eviction{query}"
        async with session.post(url, json=body) as resp:
            return resp.status, await resp.json(), resp.headers


async def test_eviction_answers_like_the_real_server(server):
    for index in range(3):
        server.add_pod(namespace="ml", name=f"w{index}", labels={"app": "train"})
    server.add_pdb(namespace="ml", name="half", selector={"app": "train"}, min_available="50%")  # needs 2 of 3
    status, body, _ = await eviction(server, "w0", query="?dryRun=All")
    assert (status, body["status"], body["code"]) == (201, "Success", 201)
    status, body, _ = await eviction(server, "w0", delete_options={"dryRun": ["All"]})
    assert status == 201 and "deletionTimestamp" not in server.get_pod("ml", "w0")["metadata"]
    status, body, _ = await eviction(server, "w0")
    assert status == 201 and server.get_pod("ml", "w0")["metadata"]["deletionTimestamp"]
    status, body, headers = await eviction(server, "w1")  # w0 is terminating: 2 healthy, 2 needed
    assert (status, body["reason"]) == (429, "TooManyRequests")
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert "Retry-After" not in headers
    status, body, _ = await eviction(server, "w1", body_name="other")
    assert status == 400 and "does not match" in body["message"]
    status, body, _ = await eviction(server, "w1", query="?dryRun=All", delete_options={"dryRun": []})
    assert status == 429  # an empty body list does not conflict with the query, and a dry run checks the PDB
    status, body, _ = await eviction(server, "w0", query="?dryRun=All")
    assert status == 201  # already terminating: no PDB check
    status, body, _ = await eviction(server, "w1", query="?dryRun=All", delete_options={"dryRun": ["Bogus"]})
    assert status == 400
    status, body, _ = await eviction(server, "missing")
    assert (status, body["reason"]) == (404, "NotFound")


async def test_pdb_crud_and_computed_status(server, api):
    server.add_pod(namespace="ml", name="a", labels={"app": "x"})
    server.add_pod(namespace="ml", name="b", labels={"app": "x"}, ready=False)
    body = {"metadata": {"name": "pdb"}, "spec": {"maxUnavailable": "50%", "selector": {"matchLabels": {"app": "x"}}}}
    await api.request_json("POST", "/apis/policy/v1/namespaces/ml/poddisruptionbudgets", body=body)
    pdb = await api.policy.read_namespaced_pod_disruption_budget("pdb", "ml")
    assert (pdb.status.expected_pods, pdb.status.desired_healthy, pdb.status.current_healthy) == (2, 1, 1)
    assert pdb.status.disruptions_allowed == 0
    both = {"metadata": {"name": "bad"}, "spec": {"minAvailable": 1, "maxUnavailable": 1}}
    with pytest.raises(KubeRejected, match="cannot be both set"):
        await api.request_json("POST", "/apis/policy/v1/namespaces/ml/poddisruptionbudgets", body=both)
    await api.policy.delete_namespaced_pod_disruption_budget("pdb", "ml")
    assert (await api.policy.list_namespaced_pod_disruption_budget("ml")).items == []


async def test_leases_use_optimistic_concurrency(api):
    path = "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
    spec = {"holderIdentity": "a", "renewTime": "2026-01-01T00:00:00.000000Z"}
    created = await api.request_json("POST", path, body={"metadata": {"name": "l"}, "spec": spec})
    stale = {**created, "spec": {**spec, "holderIdentity": "b"}}
    await api.request_json("PUT", f"{path}/l", body={**created, "spec": {**spec, "holderIdentity": "c"}})
    with pytest.raises(KubeConflict, match="has been modified"):
        await api.request_json("PUT", f"{path}/l", body=stale)
    no_fraction = {"metadata": {"name": "m"}, "spec": {"renewTime": "2026-01-01T00:00:00Z"}}
    with pytest.raises(KubeRejected):  # MicroTime needs six fraction digits
        await api.request_json("POST", path, body=no_fraction)


async def test_events_priority_classes_quotas_and_config_maps(api):
    v1 = {"metadata": {"name": "e1"}, "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "gw",
          "reportingInstance": "n1", "action": "Evict", "reason": "Evicted", "type": "Warning",
          "regarding": {"kind": "Pod", "name": "p", "namespace": "ml"}, "note": "x"}
    await api.request_json("POST", "/apis/events.k8s.io/v1/namespaces/ml/events", body=v1)
    with pytest.raises(KubeRejected, match="reportingController"):
        await api.request_json("POST", "/apis/events.k8s.io/v1/namespaces/ml/events",
                               body={**v1, "metadata": {"name": "e2"}, "reportingController": ""})
    assert len((await api.request_json("GET", "/apis/events.k8s.io/v1/events"))["items"]) == 1
    await api.scheduling.create_priority_class(k8s.V1PriorityClass(metadata=k8s.V1ObjectMeta(name="hi"), value=9))
    assert (await api.scheduling.read_priority_class("hi")).value == 9
    quota = {"metadata": {"name": "q"}, "spec": {"hard": {"nvidia.com/gpu": "4"}}}
    await api.request_json("POST", "/api/v1/namespaces/ml/resourcequotas", body=quota)
    assert [q.metadata.name for q in (await api.core.list_resource_quota_for_all_namespaces()).items] == ["q"]
    cm = await api.core.create_namespaced_config_map("ml", k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="c"),
                                                                          data={"paused": "false"}))
    cm.data = {"paused": "true"}
    await api.core.replace_namespaced_config_map("c", "ml", cm)
    assert (await api.core.read_namespaced_config_map("c", "ml")).data == {"paused": "true"}


async def test_fault_switches_and_request_log(server, api):
    server.fail_next(1, status=500, path_prefix="/api/v1/namespaces/other")
    await api.core.list_namespaced_pod("ml")  # not under the prefix: answered normally
    with pytest.raises(k8s.ApiException) as caught:
        await api.core.list_namespaced_pod("other")
    assert caught.value.status == 500
    await api.core.list_namespaced_pod("other")  # only once
    assert [(m, p) for m, p, q in server.requests] == [("GET", "/api/v1/namespaces/ml/pods")] + [
        ("GET", "/api/v1/namespaces/other/pods")] * 2
