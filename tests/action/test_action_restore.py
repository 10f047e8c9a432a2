"""A restart is no way around pacing: the bucket starts empty, and the node's own eviction Events are read back
into the cooldowns, the evicted-pod memory and the lineage memory — against the fake API server over HTTP."""

from __future__ import annotations

import io

import pytest

from action_builders import finding
from watchdog.action import ActionStage, AuditLog
from watchdog.config.action import ActionPolicy
from watchdog.testbed.cluster.apiserver import FakeApiServer
from watchdog.kube.client import KubeApi
from watchdog.kube.eviction import RecordedEviction, KubeEvictions
from watchdog.kube.pods import pod_info
from watchdog.model import Attribution, PodIndex
from watchdog.model import EvictionResult as R
from watchdog.model import FindingKind as K
from watchdog.testbed import SimClock


@pytest.fixture
def cluster(server: FakeApiServer, api: KubeApi):
    clock = SimClock(1_800_000_000.0)  # the agent's clock and the Event writer's wall clock: the same simulated time
    server.add_pod(namespace="ml", name="train-7d9f8b6c4-x2x9z", priority=1, labels={"tenant": "ml"})
    server.add_pod(namespace="ml", name="train-7d9f8b6c4-k8q4w", priority=1, labels={"tenant": "ml"})
    server.add_pod(namespace="web", name="frontend", priority=100)
    return server, KubeEvictions(api, clock=clock), clock


def policy(mode: str = "enforce", **overrides) -> ActionPolicy:
    return ActionPolicy.model_validate({"mode": mode, "memory_pressure": {"for_seconds": 0},
                                        "tenant_label": "tenant", **overrides})


def agent(kube: KubeEvictions, clock: SimClock, *, node: str = "node-1", mode: str = "enforce") -> ActionStage:
    return ActionStage(policy(mode), kube, clock=clock, audit=AuditLog(stream=io.StringIO()), node=node,
                       kill_switch=None)


def world(server: FakeApiServer, name: str):
    """A memory-pressure finding on the web pod's GPU, relieved by evicting `name` (the only pod that uses it)."""
    pods = [pod_info(p) for p in server.objects("pods")]
    by_name = {p.name: p for p in pods}
    victim = by_name["frontend"]
    f = finding(K.MEMORY_PRESSURE, key="mp/gpu-0", victims=(victim,), usage={f"ml/{name}": 8e9}, needed=1e9)
    return [f], Attribution(index=PodIndex.of(pods))


async def test_a_restart_keeps_the_evicted_pod_its_tenant_and_its_replacement_in_cooldown(cluster):
    server, kube, clock = cluster
    first = agent(kube, clock)
    clock.advance(60)  # the first send waits for a token (the bucket starts empty)
    stale = world(server, "train-7d9f8b6c4-x2x9z")  # the pod cache as it stays if the watch lags the eviction
    assert [o.result for o in (await first.run_cycle(*stale)).outcomes] == [R.EVICTED]
    clock.advance(40)  # the agent restarts 40 s later: a new process, a new ActionStage

    restarted = agent(kube, clock)
    assert restarted.pacer.tokens(clock.now()) == 0.0  # empty at process start
    assert await restarted.restore_from_api() == 1 and restarted.restored == 1
    clock.advance(60)  # a token is back: only the restored memory holds the agent now
    outcomes = (await restarted.run_cycle(*stale)).outcomes
    assert [o.result for o in outcomes] == [R.ALREADY_EVICTED]
    # The replacement the ReplicaSet made (another name, the same workload): the workload's cooldown holds it.
    outcomes = (await restarted.run_cycle(*world(server, "train-7d9f8b6c4-k8q4w"))).outcomes
    assert [o.result for o in outcomes] == [R.COOLDOWN] and "ml/ReplicaSet/train-7d9f8b6c4" in outcomes[0].detail
    assert [p for _, p, _ in server.requests if p.endswith("/eviction")] == [
        "/api/v1/namespaces/ml/pods/train-7d9f8b6c4-x2x9z/eviction"]  # one POST in all


async def test_the_tenant_cooldown_is_restored_under_the_tenant_label(cluster):
    server, kube, clock = cluster
    clock.advance(60)
    first = agent(kube, clock)
    clock.advance(60)
    await first.run_cycle(*world(server, "train-7d9f8b6c4-x2x9z"))
    (event,) = [e for e in server.objects("events", "ml") if e["reason"] == "GpuWatchdogEvicted"]
    assert event["metadata"]["labels"] == {"gpu-watchdog.io/reason": "GpuWatchdogEvicted",
                                           "gpu-watchdog.io/node": "node-1", "gpu-watchdog.io/tenant": "ml",
                                           "gpu-watchdog.io/owner-kind": "ReplicaSet"}
    restarted = agent(kube, clock)
    await restarted.restore_from_api()
    assert restarted.pacer._tenant_until == {"ml": clock.now() + 300.0}  # noqa: SLF001


async def test_dry_run_events_restore_the_cooldowns_too_and_other_nodes_are_ignored(cluster):
    server, kube, clock = cluster
    elsewhere = agent(kube, clock, node="node-2", mode="dry-run")
    clock.advance(60)
    await elsewhere.run_cycle(*world(server, "train-7d9f8b6c4-x2x9z"))  # another node's dry run
    here = agent(kube, clock, mode="dry-run")
    clock.advance(60)
    assert [o.result for o in (await here.run_cycle(*world(server, "train-7d9f8b6c4-k8q4w"))).outcomes] == [R.DRY_RUN]
    restarted = agent(kube, clock)
    assert await restarted.restore_from_api() == 1  # only node-1's own Event
    assert set(restarted.pacer._pod_until) == {"ml/train-7d9f8b6c4-k8q4w"}  # noqa: SLF001
    assert restarted.pacer._evicted_until == {}  # noqa: SLF001 - a dry run evicted nothing


async def test_events_older_than_the_longest_memory_are_not_restored(cluster):
    server, kube, clock = cluster
    first = agent(kube, clock)
    clock.advance(60)
    await first.run_cycle(*world(server, "train-7d9f8b6c4-x2x9z"))
    p = policy()
    clock.advance(p.owner_cooldown_max_seconds + p.owner_repeat_window_seconds + 1)
    assert await agent(kube, clock).restore_from_api() == 0


async def test_an_unreadable_api_degrades_to_an_empty_bucket(cluster):
    server, kube, clock = cluster
    server.fail_next(status=403, path_prefix="/api/v1/events")
    restarted = agent(kube, clock)
    assert await restarted.restore_from_api() == 0 and restarted.restore_failures == 1
    assert restarted.pacer.tokens(clock.now()) == 0.0
    assert await agent(None, clock).restore_from_api() == 0  # no Kubernetes API: nothing to restore


async def test_recent_evictions_filters_by_reason_node_pod_and_age(cluster):
    server, kube, clock = cluster
    ref = pod_info(server.get_pod("web", "frontend")).ref
    for reason, host in [("GpuWatchdogEvicted", "node-1"), ("GpuWatchdogEvictionBlocked", "node-1"),
                         ("GpuWatchdogDryRun", "node-9")]:
        assert await kube.record_event(ref, reason=reason, message="m", host=host, tenant="web")
        clock.advance(10)
    found = await kube.recent_evictions("node-1", reasons=("GpuWatchdogEvicted", "GpuWatchdogDryRun"),
                                        within_seconds=3600)
    assert found == [RecordedEviction(namespace="web", name="frontend", uid=ref.uid, reason="GpuWatchdogEvicted",
                                      age_seconds=30.0, tenant="web", owner_kind=None)]
    assert await kube.recent_evictions("node-1", reasons=("GpuWatchdogEvicted",), within_seconds=29) == []


def test_restore_feeds_only_attempts_that_went_through():
    clock = SimClock(1_800_000_000.0)
    stage = ActionStage(policy(), None, clock=clock, audit=AuditLog(stream=io.StringIO()), node="n",
                        kill_switch=None)
    records = [
        RecordedEviction("ml", "a-5d8f9c7b6-bcdfg", "u1", "GpuWatchdogEvicted", 100.0, "ml", "ReplicaSet"),
        RecordedEviction("ml", "b", "u2", "GpuWatchdogEvictionBlocked", 50.0),
    ]
    assert stage.restore(records) == 1
    assert stage.pacer._pod_until == {"ml/a-5d8f9c7b6-bcdfg": clock.now() - 100.0 + 600.0}  # noqa: SLF001

