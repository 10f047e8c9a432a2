"""The action stage against the real KubeEvictions and the fake API server over HTTP: what goes on the wire in
each mode, and what each eviction answer becomes (PDB, 404, 403, 500), including backoff and Events."""

from __future__ import annotations

import io
import json

import pytest

from action_builders import finding, pod, warmed_stage
from watchdog.action import AuditLog, KillSwitch
from watchdog.config.action import ActionPolicy
from watchdog.testbed.cluster.apiserver import FakeApiServer
from watchdog.kube.client import KubeApi
from watchdog.kube.eviction import KubeEvictions
from watchdog.kube.pods import pod_info
from watchdog.model import Attribution, PodIndex
from watchdog.model import EvictionResult as R
from watchdog.testbed import SimClock


NOW = 1_800_000_000.0  # a wall time: Events are stamped with it


@pytest.fixture
def cluster(server: FakeApiServer, api: KubeApi):
    server.add_pod(namespace="team-b", name="batch", priority=1, labels={"app": "batch"})
    server.add_pod(namespace="team-a", name="web", priority=100, labels={"app": "web"})
    return server, KubeEvictions(api)


def world(server: FakeApiServer):
    pods = [pod_info(server.get_pod("team-b", "batch")), pod_info(server.get_pod("team-a", "web"))]
    attribution = Attribution(index=PodIndex.of(pods))
    culprit, victim = pods
    return [finding(culprit=culprit, victims=(victim,), since=0.0)], attribution


def stage(mode: str, kube: KubeEvictions, *, kill_switch=None, **policy):
    audit = io.StringIO()
    p = ActionPolicy.model_validate({"mode": mode, "interference": {"for_seconds": 0}, **policy})
    s, clock = warmed_stage(p, now=NOW, api=kube, audit=AuditLog(stream=audit), node="node-1", kill_switch=kill_switch)
    return s, clock, audit


def evictions(server: FakeApiServer) -> list[tuple[str, str, dict]]:
    return [r for r in server.requests if r[1].endswith("/eviction")]


def events(server: FakeApiServer, reason: str) -> list[dict]:
    return [e for e in server.objects("events", "team-b") if e.get("reason") == reason]


async def test_observe_sends_no_request_at_all(cluster):
    server, kube = cluster
    s, _, audit = stage("observe", kube)
    findings, attribution = world(server)
    server.requests.clear()
    outcomes = (await s.run_cycle(findings, attribution)).outcomes
    assert [o.result for o in outcomes] == [R.OBSERVED]
    assert server.requests == []
    assert json.loads(audit.getvalue())["result"] == "observed"


async def test_dry_run_sends_only_dry_run_requests(cluster):
    server, kube = cluster
    s, clock, _ = stage("dry-run", kube, pod_cooldown_seconds=0, tenant_cooldown_seconds=0,
                        node_evictions_per_minute=600)
    findings, attribution = world(server)
    for _ in range(3):
        assert [o.result for o in (await s.run_cycle(findings, attribution)).outcomes] == [R.DRY_RUN]
        clock.advance(1.0)
    sent = evictions(server)
    assert len(sent) == 3 and all(query.get("dryRun") == "All" for _, _, query in sent)
    pod = server.get_pod("team-b", "batch")
    assert pod is not None and not pod["metadata"].get("deletionTimestamp")
    assert len(events(server, "GpuWatchdogDryRun")) == 3


async def test_enforce_evicts_and_records_an_event(cluster):
    server, kube = cluster
    s, _, audit = stage("enforce", kube)
    findings, attribution = world(server)
    outcomes = (await s.run_cycle(findings, attribution)).outcomes
    assert [(o.result, o.http_status) for o in outcomes] == [(R.EVICTED, 201)]
    gone = server.get_pod("team-b", "batch")
    assert gone is None or gone["metadata"].get("deletionTimestamp")
    (event,) = events(server, "GpuWatchdogEvicted")
    assert event["involvedObject"]["name"] == "batch" and event["source"]["host"] == "node-1"
    line = json.loads(audit.getvalue())
    assert line["result"] == "evicted" and line["protects"][0]["name"] == "web"
    assert s.counts == {("evicted", "interference", "team-b"): 1}


async def test_pdb_blocks_is_retried_with_backoff_and_never_evicts(cluster):
    server, kube = cluster
    server.add_pdb(namespace="team-b", name="batch-pdb", selector={"app": "batch"}, max_unavailable=0)
    s, clock, _ = stage("enforce", kube, node_evictions_per_minute=600, node_eviction_burst=5)
    findings, attribution = world(server)
    start = clock.now()
    timeline = []
    for offset in (0, 10, 29, 30, 31, 89, 90):
        clock.set(start + offset)
        timeline.append((offset, [o.result for o in (await s.run_cycle(findings, attribution)).outcomes][0]))
    assert timeline == [
        (0, R.BLOCKED_PDB), (10, R.COOLDOWN), (29, R.COOLDOWN), (30, R.BLOCKED_PDB),
        (31, R.COOLDOWN), (89, R.COOLDOWN), (90, R.BLOCKED_PDB),
    ]
    assert len(evictions(server)) == 3
    pod = server.get_pod("team-b", "batch")
    assert pod is not None and not pod["metadata"].get("deletionTimestamp")
    assert len(events(server, "GpuWatchdogEvictionBlocked")) == 3


async def test_pdb_also_answers_dry_run(cluster):
    server, kube = cluster
    server.add_pdb(namespace="team-b", name="batch-pdb", selector={"app": "batch"}, max_unavailable=0)
    s, _, _ = stage("dry-run", kube)
    assert [o.result for o in (await s.run_cycle(*world(server))).outcomes] == [R.BLOCKED_PDB]


async def test_missing_pod_is_gone(cluster):
    server, kube = cluster
    ghost, web = pod("ghost", ns="team-b", priority=1), pod_info(server.get_pod("team-a", "web"))
    attribution = Attribution(index=PodIndex.of([ghost, web]))  # the cache still has a pod the API lost
    s, _, _ = stage("enforce", kube)
    server.requests.clear()
    outcomes = (await s.run_cycle([finding(culprit=ghost, victims=(web,))], attribution)).outcomes
    # The pod is re-read right before the send: one the API server no longer has is GONE without any POST.
    assert [(o.result, o.http_status) for o in outcomes] == [(R.GONE, None)]
    assert [(method, path) for method, path, _ in server.requests] == [("GET", "/api/v1/namespaces/team-b/pods/ghost")]
    assert events(server, "GpuWatchdogEvicted") == []


async def test_forbidden_is_an_error(cluster):
    server, kube = cluster
    server.fail_next(status=403, path_prefix="/api/v1/namespaces/team-b/pods/batch/eviction")
    s, _, _ = stage("enforce", kube)
    outcomes = (await s.run_cycle(*world(server))).outcomes
    assert [(o.result, o.http_status) for o in outcomes] == [(R.ERROR, 403)]
    assert "RBAC" in outcomes[0].detail


async def test_server_error_backs_off(cluster):
    server, kube = cluster
    server.fail_next(status=500, path_prefix="/api/v1/namespaces/team-b/pods/batch/eviction")
    s, clock, _ = stage("enforce", kube, node_evictions_per_minute=600, node_eviction_burst=5)
    findings, attribution = world(server)
    assert [o.result for o in (await s.run_cycle(findings, attribution)).outcomes] == [R.ERROR]
    clock.advance(15)
    assert [o.result for o in (await s.run_cycle(findings, attribution)).outcomes] in ([R.COOLDOWN], [R.RATE_LIMITED])
    assert len(evictions(server)) == 1
    clock.advance(15)
    assert [o.result for o in (await s.run_cycle(findings, attribution)).outcomes] == [R.EVICTED]
    assert len(evictions(server)) == 2


async def test_kill_switch_configmap_pauses_every_send(cluster):
    server, kube = cluster
    switch_settings = ActionPolicy().kill_switch
    switch = KillSwitch(kube, settings=switch_settings, namespace="gpu-watchdog")
    assert await switch.refresh() is False  # no ConfigMap: not paused
    server.set_config_map("gpu-watchdog", switch_settings.name, {"paused": "true"})
    assert await switch.refresh() is True
    s, _, audit = stage("enforce", kube, kill_switch=switch)
    server.requests.clear()
    assert [o.result for o in (await s.run_cycle(*world(server))).outcomes] == [R.PAUSED]
    assert evictions(server) == [] and json.loads(audit.getvalue())["result"] == "paused"
    server.fail_next(status=500, path_prefix="/api/v1/namespaces/gpu-watchdog/configmaps")
    assert await switch.refresh() is True and switch.failures == 1  # unreadable: the last state stays
    server.set_config_map("gpu-watchdog", switch_settings.name, {"paused": "false"})
    assert await switch.refresh() is False


# ------------------------------------------------------------------ every mode × every answer

REPLIES = ["success", "pdb", "multi_pdb", "not_found", "forbidden", "server_error", "timeout"]
EXPECTED = {
    "dry-run": {"success": R.DRY_RUN, "pdb": R.BLOCKED_PDB, "multi_pdb": R.BLOCKED, "not_found": R.GONE,
                "forbidden": R.ERROR, "server_error": R.ERROR, "timeout": R.ERROR},
    "enforce": {"success": R.EVICTED, "pdb": R.BLOCKED_PDB, "multi_pdb": R.BLOCKED, "not_found": R.GONE,
                "forbidden": R.ERROR, "server_error": R.ERROR, "timeout": R.ERROR},
}
STATUS = {"success": 201, "pdb": 429, "multi_pdb": 201, "not_found": 404, "forbidden": 403, "server_error": 500,
          "timeout": None}
EVENT = {R.DRY_RUN: "GpuWatchdogDryRun", R.EVICTED: "GpuWatchdogEvicted", R.BLOCKED_PDB: "GpuWatchdogEvictionBlocked",
         R.BLOCKED: "GpuWatchdogEvictionBlocked", R.ERROR: "GpuWatchdogEvictionFailed"}


@pytest.mark.parametrize("reply", REPLIES)
@pytest.mark.parametrize("mode", ["dry-run", "enforce"])
async def test_every_mode_and_answer_over_http(cluster, mode, reply):
    server, kube = cluster
    eviction_path = "/api/v1/namespaces/team-b/pods/batch/eviction"
    findings, attribution = world(server)
    if reply == "pdb":
        server.add_pdb(namespace="team-b", name="batch-pdb", selector={"app": "batch"}, max_unavailable=0)
    elif reply == "multi_pdb":
        server.add_pdb(namespace="team-b", name="one", selector={"app": "batch"}, max_unavailable=1)
        server.add_pdb(namespace="team-b", name="two", selector={"app": "batch"}, max_unavailable=1)
    elif reply == "not_found":
        # The pod is there when re-read, and gone by the POST (a pod whose uid the server never saw is now GONE
        # before any POST: test_missing_pod_is_gone).
        server.fail_next(status=404, path_prefix=eviction_path)
    elif reply == "forbidden":
        server.fail_next(status=403, path_prefix=eviction_path)
    elif reply == "server_error":
        server.fail_next(status=500, path_prefix=eviction_path)
    impatient = None
    if reply == "timeout":
        impatient = KubeApi.from_url(server.url, timeout=0.2)
        patient = kube

        async def reread_then_slow_down(namespace: str, name: str):
            found = await patient.get_pod(namespace, name)  # the re-read before the send is answered at once…
            server.delay(2.0)  # …and the eviction POST times out
            return found

        kube = KubeEvictions(impatient)
        kube.get_pod = reread_then_slow_down
    try:
        s, _, audit = stage(mode, kube)
        server.requests.clear()
        outcomes = (await s.run_cycle(findings, attribution)).outcomes
    finally:
        server.delay(0)
        if impatient is not None:
            await impatient.close()
    expected = EXPECTED[mode][reply]
    assert [(o.result, o.http_status) for o in outcomes] == [(expected, STATUS[reply])]
    assert json.loads(audit.getvalue())["result"] == expected.value
    sent = evictions(server)
    assert len(sent) == 1
    assert all(query.get("dryRun") == "All" for _, _, query in sent) is (mode == "dry-run")
    if mode == "dry-run" or expected is not R.EVICTED:
        stored = server.get_pod("team-b", "batch")
        assert stored is not None and not stored["metadata"].get("deletionTimestamp")
    if reply != "timeout":  # a timed-out Event POST is not written either
        reasons = [e.get("reason") for e in server.objects("events", "team-b")]
        assert reasons == ([EVENT[expected]] if expected in EVENT else [])


# ------------------------------------------------------------------ the kill switch at send time


async def test_a_flipped_configmap_pauses_the_very_next_send(cluster):
    server, kube = cluster
    settings = ActionPolicy().kill_switch
    switch = KillSwitch(kube, settings=settings, namespace="gpu-watchdog")
    assert await switch.refresh() is False  # the watcher's last read: no ConfigMap, not paused
    policy = ActionPolicy.model_validate({"mode": "dry-run", "interference": {"for_seconds": 0},
                                          "pod_cooldown_seconds": 0, "tenant_cooldown_seconds": 0,
                                          "node_evictions_per_minute": 600})
    s, clock = warmed_stage(policy, now=NOW, api=kube, audit=AuditLog(stream=io.StringIO()), node="node-1",
                            kill_switch=switch)
    findings, attribution = world(server)
    assert [o.result for o in (await s.run_cycle(findings, attribution)).outcomes] == [R.DRY_RUN]
    server.set_config_map("gpu-watchdog", settings.name, {"paused": "true"})  # well within the 10 s refresh
    server.requests.clear()
    clock.advance(1.0)
    outcomes = (await s.run_cycle(findings, attribution)).outcomes
    assert [(o.result, o.detail) for o in outcomes] == [(R.PAUSED, "kill switch is on")]
    assert evictions(server) == []
    configmap = f"/api/v1/namespaces/gpu-watchdog/configmaps/{settings.name}"
    assert [path for _, path, _ in server.requests] == [configmap]  # one GET, no POST


async def test_an_unreadable_configmap_sends_nothing(cluster):
    server, kube = cluster
    clock = SimClock(NOW)
    switch = KillSwitch(kube, settings=ActionPolicy().kill_switch, namespace="gpu-watchdog", clock=clock)
    server.fail_next(3, status=403, path_prefix="/api/v1/namespaces/gpu-watchdog/configmaps")
    assert await switch.refresh() is False and switch.unknown and switch.failures == 1
    s, stage_clock, _ = stage("enforce", kube, kill_switch=switch)
    for _ in range(3):  # the first cycle reads nothing: the failed read is not a refresh period old yet
        outcomes = (await s.run_cycle(*world(server))).outcomes
        assert outcomes[0].result is R.PAUSED and outcomes[0].detail.startswith("kill switch unknown")
        clock.advance(10.0)  # a failed read is retried a refresh period later, not every cycle
        stage_clock.advance(10.0)
    assert evictions(server) == [] and switch.failures == 3
    assert [o.result for o in (await s.run_cycle(*world(server))).outcomes] == [R.EVICTED]  # readable (absent) again


# ------------------------------------------------------------------ APF throttling and failed attempts


async def test_throttling_429_is_rate_limited_and_holds_every_send(cluster):
    server, kube = cluster
    server.add_pod(namespace="team-c", name="other", priority=1)
    server.fail_next(status=429, path_prefix="/api/v1/namespaces/team-b/pods/batch/eviction")
    s, clock, _ = stage("enforce", kube, node_evictions_per_minute=600, node_eviction_burst=5)
    findings, attribution = world(server)
    assert [(o.result, o.http_status) for o in (await s.run_cycle(findings, attribution)).outcomes] == [(R.RATE_LIMITED, 429)]
    assert events(server, "GpuWatchdogEvictionBlocked") == []  # nothing about the pod's budget
    other = pod_info(server.get_pod("team-c", "other"))
    attribution = Attribution(index=PodIndex.of([*attribution.pods.values(), other]))
    another = finding(culprit=other, victims=findings[0].victims, key="interference/gpu-1")
    clock.advance(29)  # APF asked the whole client to wait: a different pod waits too
    outcomes = (await s.run_cycle([another], attribution)).outcomes
    assert [o.result for o in outcomes] == [R.RATE_LIMITED] and "throttled" in outcomes[0].detail
    assert len(evictions(server)) == 1
    clock.advance(1)
    assert [o.result for o in (await s.run_cycle(findings, attribution)).outcomes] == [R.EVICTED]


async def test_a_failed_attempt_is_an_event_on_the_pod_once_per_streak(cluster):
    server, kube = cluster
    server.fail_next(2, status=403, path_prefix="/api/v1/namespaces/team-b/pods/batch/eviction")
    s, clock, _ = stage("enforce", kube, node_evictions_per_minute=600, node_eviction_burst=5)
    findings, attribution = world(server)
    results = []
    for _ in range(4):  # error, error again after the 30 s backoff, then 60 s of backoff, then evicted
        results.append([o.result for o in (await s.run_cycle(findings, attribution)).outcomes][0])
        clock.advance(30)
    assert results == [R.ERROR, R.ERROR, R.COOLDOWN, R.EVICTED]
    failed = events(server, "GpuWatchdogEvictionFailed")
    assert len(failed) == 1 and failed[0]["type"] == "Warning"
    assert "RBAC" in failed[0]["message"] and failed[0]["involvedObject"]["name"] == "batch"
