"""A real kubectl (1.37, from the test extras) against the fake API server, used as a person would use it.

Every Kubernetes behaviour the project claims is proven against the fake; these tests prove the fake against a
client nobody here wrote: discovery, server-side tables, watch, create/delete, cordon and drain through the
eviction subresource and a PodDisruptionBudget, status subresources, protobuf bodies and raw requests.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest

from tests.fake_api import FakeApi
from watchdog.testbed.cluster.apiserver import FakeApiServer
from watchdog.testbed.cluster.apiserver_discovery import AGGREGATED

KUBECTL = Path(sys.executable).with_name("kubectl")  # pip install -e .[test] puts it beside the interpreter
BLOCKED = "Cannot evict pod as it would violate the pod's disruption budget"


@dataclass
class Result:
    rc: int
    out: str
    err: str


class Kubectl:
    def __init__(self, kubeconfig: Path, home: Path):
        assert KUBECTL.exists(), f"{KUBECTL} is missing: install the test extras (pip install -e '.[test]')"
        self.env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "KUBECONFIG": str(kubeconfig),
                    "KUBECACHEDIR": str(home / "cache")}

    async def start(self, *args: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(str(KUBECTL), *args, env=self.env, stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)

    async def __call__(self, *args: str, stdin: str = "") -> Result:
        process = await self.start(*args)
        try:
            out, err = await asyncio.wait_for(process.communicate(stdin.encode()), 60)
        finally:
            if process.returncode is None:  # timed out: leave no kubectl behind
                process.kill()
                await process.wait()
        return Result(process.returncode, out.decode(), err.decode())

    async def ok(self, *args: str, stdin: str = "") -> str:
        result = await self(*args, stdin=stdin)
        assert result.rc == 0, f"kubectl {' '.join(args)}: {result.err}"
        return result.out


@pytest.fixture
async def cluster(fake_api: FakeApi) -> FakeApiServer:
    fake = await fake_api.server(deletion_delay=0.2)  # graceful deletions complete quickly
    fake.add_node("node-1")
    fake.add_node("node-2")
    return fake


@pytest.fixture
def kubectl(cluster, tmp_path) -> Kubectl:
    return Kubectl(cluster.write_kubeconfig(tmp_path / "kubeconfig"), tmp_path)


async def raw_get(url: str, accept: str = "application/json") -> tuple[str, dict]:
    async with aiohttp.ClientSession() as session, session.get(url, headers={"Accept": accept}) as response:
        return response.headers["Content-Type"], json.loads(await response.read())


async def read_until(stream: asyncio.StreamReader, needle: str, *, timeout: float = 20) -> str:
    seen = ""

    async def scan() -> str:
        nonlocal seen
        while needle not in seen:
            line = await stream.readline()
            assert line, f"stream ended before {needle!r}; got {seen!r}"
            seen += line.decode()
        return seen

    return await asyncio.wait_for(scan(), timeout)


async def test_discovery_in_both_formats(cluster, kubectl):
    resources = (await kubectl.ok("api-resources", "-o", "wide")).splitlines()
    rows = {tuple(line.split()[:3]) for line in resources}
    assert {("pods", "po", "v1"), ("nodes", "no", "v1"), ("poddisruptionbudgets", "pdb", "policy/v1"),
            ("priorityclasses", "pc", "scheduling.k8s.io/v1"), ("events", "ev", "events.k8s.io/v1")} <= rows
    assert any(line.startswith("leases ") and "coordination.k8s.io/v1" in line for line in resources)
    assert set((await kubectl.ok("api-versions")).split()) >= {
        "v1", "policy/v1", "coordination.k8s.io/v1", "events.k8s.io/v1", "scheduling.k8s.io/v1"}
    assert json.loads(await kubectl.ok("version", "-o", "json"))["serverVersion"]["minor"] == "37"

    content_type, aggregated = await raw_get(f"{cluster.url}/api", accept=f"{AGGREGATED},application/json")
    assert content_type == AGGREGATED and aggregated["kind"] == "APIGroupDiscoveryList"
    pods = next(r for r in aggregated["items"][0]["versions"][0]["resources"] if r["resource"] == "pods")
    eviction = next(s for s in pods["subresources"] if s["subresource"] == "eviction")
    assert eviction["responseKind"] == {"group": "policy", "version": "v1", "kind": "Eviction"}
    _, legacy = await raw_get(f"{cluster.url}/apis")
    assert legacy["kind"] == "APIGroupList" and "policy" in {g["name"] for g in legacy["groups"]}
    _, core = await raw_get(f"{cluster.url}/api/v1")
    entry = next(r for r in core["resources"] if r["name"] == "pods/eviction")
    assert (entry["group"], entry["version"], entry["kind"]) == ("policy", "v1", "Eviction")


async def test_kubectl_reads_aggregated_discovery_first_and_legacy_when_that_is_all(cluster, kubectl, tmp_path,
                                                                                   fake_api: FakeApi):
    await kubectl.ok("get", "pdb", "-A")
    discovery = {path for _, path, _ in cluster.requests if not path.endswith("poddisruptionbudgets")}
    assert discovery == {"/api", "/apis"}  # one aggregated answer each, no per-group-version documents
    old = await fake_api.server(aggregated_discovery=False)
    old.add_pod(namespace="ml", name="train-0")
    legacy = Kubectl(old.write_kubeconfig(tmp_path / "old"), tmp_path / "old-home")
    assert "train-0" in await legacy.ok("get", "pods", "-n", "ml")
    assert "pdb" in await legacy.ok("api-resources")
    paths = {path for _, path, _ in old.requests}
    assert {"/api", "/apis", "/api/v1", "/apis/policy/v1", "/apis/coordination.k8s.io/v1"} <= paths


async def test_every_discovered_resource_is_served(cluster):
    _, groups = await raw_get(f"{cluster.url}/apis")
    versions = ["/api/v1"] + [f"/apis/{v['groupVersion']}" for g in groups["groups"] for v in g["versions"]]
    async with aiohttp.ClientSession() as session:
        for prefix in versions:
            _, listing = await raw_get(cluster.url + prefix)
            for resource in listing["resources"]:
                name, _, sub = resource["name"].partition("/")
                scope = f"{prefix}/namespaces/ml" if resource["namespaced"] else prefix
                path = f"{scope}/{name}/missing/{sub}" if sub else f"{scope}/{name}"
                method = "POST" if sub == "eviction" else "GET"
                async with session.request(method, cluster.url + path, json={}) as response:
                    body = await response.json()
                # A served path answers for the object (or 400 for the empty Eviction), never "no such route".
                assert body.get("message") != "the server could not find the requested resource", path


async def test_get_pods_json_is_the_api_list(cluster, kubectl):
    cluster.add_pod(namespace="ml", name="train-0", labels={"app": "train"})
    cluster.add_pod(namespace="cv", name="web-0", node="node-2")
    listed = json.loads(await kubectl.ok("get", "pods", "-A", "-o", "json"))
    _, api = await raw_get(f"{cluster.url}/api/v1/pods")
    assert listed["items"] == api["items"] and len(api["items"]) == 2


async def test_tables_have_the_real_columns(cluster, kubectl):
    cluster.add_pod(namespace="ml", name="train-0", labels={"app": "train"})
    cluster.add_pdb(namespace="ml", name="keep", selector={"app": "train"}, max_unavailable=0)
    async with aiohttp.ClientSession() as session:
        lease = {"metadata": {"name": "gpu-watchdog-controller"}, "spec": {"holderIdentity": "replica-a"}}
        event = {"metadata": {"name": "train-0.1"}, "reason": "Evicted", "type": "Warning", "message": "noisy",
                 "involvedObject": {"kind": "Pod", "name": "train-0", "namespace": "ml"}}
        for path, body in (("/apis/coordination.k8s.io/v1/namespaces/ml/leases", lease),
                           ("/api/v1/namespaces/ml/events", event)):
            async with session.post(cluster.url + path, json=body) as response:
                assert response.status == 201
    pods = (await kubectl.ok("get", "pods", "-A", "-o", "wide")).splitlines()
    assert pods[0].split()[:6] == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert pods[1].split()[:5] == ["ml", "train-0", "1/1", "Running", "0"] and "node-1" in pods[1]
    mixed = await kubectl.ok("get", "pdb,leases,events", "-n", "ml")
    assert "ALLOWED DISRUPTIONS" in mixed and "poddisruptionbudget.policy/keep   N/A" in mixed
    assert "lease.coordination.k8s.io/gpu-watchdog-controller   replica-a" in mixed
    assert "Warning   Evicted   pod/train-0   noisy" in mixed
    nodes = (await kubectl.ok("get", "nodes")).splitlines()
    assert nodes[1].split()[:2] == ["node-1", "Ready"]


async def test_describe_shows_an_objects_events(cluster, kubectl):
    """``kubectl describe`` finds Events by involvedObject field selectors: how a person sees an eviction."""
    pod = cluster.add_pod(namespace="ml", name="train-0")
    event = {"metadata": {"name": "train-0.1"}, "reason": "Evicted", "type": "Warning", "message": "sm hog",
             "involvedObject": {"kind": "Pod", "name": "train-0", "namespace": "ml", "uid": pod["metadata"]["uid"]},
             "source": {"component": "gpu-watchdog"}}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{cluster.url}/api/v1/namespaces/ml/events", json=event) as response:
            assert response.status == 201
    described = await kubectl.ok("describe", "pod", "train-0", "-n", "ml")
    assert described.split("Events:")[1].split("\n")[3].split() == ["Warning", "Evicted", "<unknown>",
                                                                     "gpu-watchdog", "sm", "hog"]
    selected = await kubectl.ok("get", "events", "-n", "ml", "--field-selector=reason=Evicted,type=Warning",
                                "-o", "name")
    assert selected.split() == ["event/train-0.1"]
    assert "Events:              <none>" in await kubectl.ok("describe", "node", "node-1")


async def test_watch_sees_a_pod_added_and_deleted(cluster, kubectl):
    cluster.add_pod(namespace="ml", name="train-0")
    process = await kubectl.start("get", "pods", "-n", "ml", "-w", "--output-watch-events")
    try:
        await cluster.watching(1)
        cluster.add_pod(namespace="ml", name="late")
        seen = await read_until(process.stdout, "late")
        cluster.pods.delete("ml", "late", {"gracePeriodSeconds": 0}, dry_run=False)
        seen += await read_until(process.stdout, "DELETED")
    finally:
        process.kill()
        await process.wait()
    events = [line.split()[:2] for line in seen.splitlines()[1:]]
    assert events == [["ADDED", "train-0"], ["ADDED", "late"], ["DELETED", "late"]]


async def test_create_and_delete(cluster, kubectl, tmp_path):
    manifest = tmp_path / "pod.yaml"
    manifest.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: c, namespace: ml}\n"
                        "spec: {containers: [{name: main, image: registry.local/app:1}]}\n")
    assert "pod/c created" in await kubectl.ok("create", "-f", str(manifest))
    assert cluster.get_pod("ml", "c")["status"]["phase"] == "Pending"  # admission reset the status
    await kubectl.ok("delete", "-f", str(manifest))
    assert cluster.get_pod("ml", "c") is None
    cluster.add_pod(namespace="ml", name="running")
    # A graceful delete: kubectl waits through a watch-list (sendInitialEvents) until the pod is gone.
    assert 'pod "running" deleted' in await kubectl.ok("delete", "pod", "-n", "ml", "running")
    assert cluster.get_pod("ml", "running") is None
    assert any(query.get("sendInitialEvents") == "true" for _, _, query in cluster.requests)


async def test_generators_send_protobuf_bodies(cluster, kubectl):
    """``kubectl create configmap`` (the demo's kill switch) and ``create pdb`` post protobuf, not JSON."""
    await kubectl.ok("create", "configmap", "gpu-watchdog-kill-switch", "-n", "gpu-watchdog",
                     "--from-literal=paused=true")
    (switch,) = cluster.objects("configmaps", "gpu-watchdog")
    assert switch["data"] == {"paused": "true"}
    await kubectl.ok("create", "pdb", "keep", "-n", "ml", "--selector=app=train", "--max-unavailable=0")
    (pdb,) = cluster.objects("poddisruptionbudgets", "ml")
    assert pdb["spec"] == {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "train"}}}
    await kubectl.ok("create", "pdb", "half", "-n", "ml", "--selector=app=web", "--min-available=50%")
    assert cluster.objects("poddisruptionbudgets", "ml")[0]["spec"]["minAvailable"] == "50%"
    await kubectl.ok("create", "priorityclass", "scavenger", "--value=-5", "--description=last to run")
    (scavenger,) = cluster.objects("priorityclasses")
    assert (scavenger["value"], scavenger["description"]) == (-5, "last to run")
    refused = await kubectl("create", "quota", "q", "-n", "ml", "--hard=pods=3")
    assert refused.rc == 1 and "unknown format" in refused.err  # 415: a kind the fake cannot read as protobuf


async def test_drain_dry_run_lists_the_pods_it_would_evict(cluster, kubectl):
    for name, node, app in (("train-0", "node-1", "train"), ("train-1", "node-1", "train"),
                            ("web-0", "node-1", "web"), ("train-2", "node-2", "train")):
        cluster.add_pod(namespace="ml", name=name, node=node, labels={"app": app})
    out = await kubectl.ok("drain", "node-1", "--pod-selector", "app=train", "--dry-run=server")
    evicting = {line for line in out.splitlines() if line.startswith("evicting pod")}
    assert evicting == {"evicting pod ml/train-0 (server dry run)", "evicting pod ml/train-1 (server dry run)"}
    assert "node/node-1 drained (server dry run)" in out
    assert not cluster.objects("nodes")[0].get("spec", {}).get("unschedulable")  # the cordon was a dry run too
    assert all(not p["metadata"].get("deletionTimestamp") for p in cluster.objects("pods"))


async def test_drain_waits_for_the_disruption_budget(cluster, kubectl):
    cluster.add_pod(namespace="ml", name="train-0", labels={"app": "train"})
    cluster.add_pod(namespace="ml", name="web-0", labels={"app": "web"})
    cluster.add_pdb(namespace="ml", name="keep", selector={"app": "train"}, max_unavailable=0)
    process = await kubectl.start("drain", "node-1", "--pod-selector", "app=train", "--timeout=60s")
    try:
        report = await read_until(process.stderr, BLOCKED)  # the 429, retried every 5 s as on a real cluster
        assert 'error when evicting pods/"train-0" -n "ml" (will retry after 5s)' in report
        assert cluster.objects("nodes")[0]["spec"]["unschedulable"] is True  # cordoned first
        assert not cluster.get_pod("ml", "train-0")["metadata"].get("deletionTimestamp")
        await kubectl.ok("patch", "pdb", "keep", "-n", "ml", "--type=merge", "-p", '{"spec":{"maxUnavailable":1}}')
        out, _ = await asyncio.wait_for(process.communicate(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0
    assert "pod/train-0 evicted" in out.decode() and "node/node-1 drained" in out.decode()
    assert cluster.get_pod("ml", "train-0") is None and cluster.get_pod("ml", "web-0") is not None
    assert "Ready,SchedulingDisabled" in await kubectl.ok("get", "node", "node-1")
    await kubectl.ok("uncordon", "node-1")
    schedulable = await kubectl.ok("get", "nodes", "--field-selector", "spec.unschedulable=false", "-o", "name")
    assert schedulable.split() == ["node/node-1", "node/node-2"]


async def test_status_subresource(cluster, kubectl):
    cluster.add_pod(namespace="ml", name="train-0")
    patch = '{"status":{"phase":"Failed"},"spec":{"nodeName":"elsewhere"}}'
    await kubectl.ok("patch", "pod", "train-0", "-n", "ml", "--subresource=status", "--type=merge", "-p", patch)
    pod = cluster.get_pod("ml", "train-0")
    assert (pod["status"]["phase"], pod["spec"]["nodeName"]) == ("Failed", "node-1")  # only the status changes
    out = await kubectl.ok("get", "pods", "-n", "ml", "--field-selector=status.phase=Failed", "-o", "name")
    assert out.split() == ["pod/train-0"]


async def test_raw_requests_keep_selectors_and_resource_versions(cluster, kubectl):
    cluster.add_pod(namespace="ml", name="train-0", labels={"app": "train"})
    cluster.add_pod(namespace="ml", name="web-0", node="node-2", labels={"app": "web"})

    async def names(query: str) -> list[str]:
        listing = json.loads(await kubectl.ok("get", "--raw", f"/api/v1/pods?{query}"))
        return [p["metadata"]["name"] for p in listing["items"]]

    assert await names("fieldSelector=spec.nodeName%3Dnode-1") == ["train-0"]
    assert await names("labelSelector=" + quote("app in (web,other)")) == ["web-0"]
    bad = await kubectl("get", "--raw", "/api/v1/pods?fieldSelector=spec.host%3Dx")
    assert bad.rc == 1 and "field label not supported: spec.host" in bad.err
    listing = json.loads(await kubectl.ok("get", "--raw", "/api/v1/pods"))
    version = listing["metadata"]["resourceVersion"]
    assert version == cluster.resource_version
    cluster.add_pod(namespace="ml", name="late")
    changes = await kubectl.ok("get", "--raw", f"/api/v1/pods?watch=true&resourceVersion={version}&timeoutSeconds=1")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in map(json.loads, changes.splitlines())] == [
        ("ADDED", "late")]
    cluster.expire_history()
    (gone,) = map(json.loads, (await kubectl.ok("get", "--raw", f"/api/v1/pods?watch=true&resourceVersion={version}"))
                  .splitlines())
    assert gone["type"] == "ERROR" and gone["object"]["code"] == 410
    stream = await kubectl.ok("get", "--raw", "/api/v1/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true"
                              "&resourceVersionMatch=NotOlderThan&timeoutSeconds=1")
    events = [json.loads(line) for line in stream.splitlines()]
    assert [e["type"] for e in events] == ["ADDED", "ADDED", "ADDED", "BOOKMARK"]
    assert events[-1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
