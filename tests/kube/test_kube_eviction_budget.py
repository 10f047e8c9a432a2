"""The cluster-wide eviction budget: several senders, one fake API server, one ConfigMap, compare-and-swap writes."""

from __future__ import annotations

import asyncio
import json

from kube_helpers import EPOCH

from watchdog.config.action import ClusterBudget
from watchdog.kube.client import KubeApi
from watchdog.kube.eviction_budget import DATA_KEY, SPENT, UNKNOWN, ClusterEvictionBudget
from watchdog.testbed import SimClock
from watchdog.testbed.cluster.apiserver_store import CONFIGMAPS

NAMESPACE, NAME = "gpu-watchdog", "gpu-watchdog-eviction-budget"
PATH = f"/api/v1/namespaces/{NAMESPACE}/configmaps/{NAME}"


def budget(api, clock, identity, *, max_evictions=5, window=600.0, **kwargs) -> ClusterEvictionBudget:
    settings = ClusterBudget(enabled=True, max_evictions=max_evictions, window_seconds=window)
    return ClusterEvictionBudget(api, settings=settings, namespace=NAMESPACE, identity=identity,
                                 wall_clock=clock.now, **kwargs)


def stored(server) -> list[dict]:
    [config_map] = [c for c in server.objects("configmaps", NAMESPACE) if c["metadata"]["name"] == NAME]
    return json.loads((config_map.get("data") or {}).get(DATA_KEY, "[]"))


def puts(server) -> int:
    return sum(1 for method, path, _ in server.requests if method == "PUT" and path == PATH)


async def test_agents_taking_at_once_never_exceed_the_ceiling_and_retry_their_conflicts(server, api):
    server.set_config_map(NAMESPACE, NAME, {})
    clock = SimClock(epoch=EPOCH)
    agents = [budget(api, clock, f"node-{i}") for i in range(4)]

    async def keep_taking(agent: ClusterEvictionBudget) -> list[str | None]:
        return [await agent.take(f"team-a/{agent._identity}-pod-{n}") for n in range(4)]

    answers = await asyncio.gather(*(keep_taking(agent) for agent in agents))
    taken = sum(agent.taken for agent in agents)
    assert taken == sum(answer is None for per_agent in answers for answer in per_agent)
    assert taken <= 5
    # Four agents read the same resourceVersion and wrote: the fake answered 409 to all but one of each round, and
    # every PUT that did not take a slot was such a conflict (no fault was injected).
    conflicts = sum(agent.conflicts for agent in agents)
    assert conflicts > 0 and puts(server) == taken + conflicts
    while sum(agent.taken for agent in agents) < 5:  # a sender that lost every retry gave up, safely; fill the rest
        assert await agents[0].take("team-a/late") is None
    assert len(stored(server)) == 5
    assert {entry["by"] for entry in stored(server)} <= {f"node-{i}" for i in range(4)}
    for agent in agents:
        refusal = await agent.take("team-a/one-more")
        assert refusal is not None and refusal.startswith(SPENT) and f"{NAMESPACE}/{NAME}" in refusal
    assert len(stored(server)) == 5


async def test_the_window_slides(server, api):
    server.set_config_map(NAMESPACE, NAME, {})
    clock = SimClock(epoch=EPOCH)
    a, b = budget(api, clock, "node-a", max_evictions=2, window=600), budget(api, clock, "node-b", max_evictions=2,
                                                                             window=600)
    assert await a.take("ns/p1") is None
    clock.advance(300)
    assert await b.take("ns/p2") is None
    refusal = await a.take("ns/p3")
    assert refusal.startswith(SPENT) and "next slot in 300s" in refusal
    clock.advance(301)  # p1's slot is older than the window now
    assert await b.take("ns/p3") is None
    assert [entry["pod"] for entry in stored(server)] == ["ns/p2", "ns/p3"]  # the expired entry is dropped


async def test_an_unreadable_budget_sends_nothing(server, api):
    server.set_config_map(NAMESPACE, NAME, {})
    clock = SimClock(epoch=EPOCH)
    agent = budget(api, clock, "node-a")
    server.fail_next(status=500, path_prefix=PATH)
    refusal = await agent.take("ns/p")
    assert refusal.startswith(UNKNOWN) and "500" in refusal
    server.fail_next(status=403, path_prefix=PATH)
    assert (await agent.take("ns/p")).startswith(UNKNOWN)
    assert puts(server) == 0 and stored(server) == [] and agent.failures == 2
    assert await agent.take("ns/p") is None  # readable again: it takes


async def test_a_missing_or_foreign_budget_object_sends_nothing(server, api):
    clock = SimClock(epoch=EPOCH)
    agent = budget(api, clock, "node-a")
    refusal = await agent.take("ns/p")
    assert refusal.startswith(UNKNOWN) and "does not exist" in refusal
    assert server.objects("configmaps", NAMESPACE) == []  # never created by a sender
    server.set_config_map(NAMESPACE, NAME, {DATA_KEY: '{"not": "a list"}'})
    assert (await agent.take("ns/p")).startswith(UNKNOWN)
    server.set_config_map(NAMESPACE, NAME, {DATA_KEY: '[{"at": true}]'})
    assert (await agent.take("ns/p")).startswith(UNKNOWN)
    assert puts(server) == 0


async def test_a_stopped_api_server_sends_nothing(server):
    server.set_config_map(NAMESPACE, NAME, {})
    url = server.url
    await server.stop()
    async with KubeApi.from_url(url, timeout=2) as api:
        refusal = await budget(api, SimClock(epoch=EPOCH), "node-a").take("ns/p")
    assert refusal.startswith(UNKNOWN) and "cannot read" in refusal


async def test_a_write_refused_for_another_reason_sends_nothing(server, api):
    server.set_config_map(NAMESPACE, NAME, {})
    agent = budget(api, SimClock(epoch=EPOCH), "node-a")
    original = api.request_json

    async def forbid_puts(method, path, **kwargs):
        if method == "PUT":
            server.fail_next(status=403, path_prefix=PATH)
        return await original(method, path, **kwargs)

    api.request_json = forbid_puts
    refusal = await agent.take("ns/p")
    assert refusal.startswith(UNKNOWN) and "cannot write" in refusal and stored(server) == []


async def test_conflicts_without_end_give_up_and_send_nothing(server, api):
    server.set_config_map(NAMESPACE, NAME, {})
    agent = budget(api, SimClock(epoch=EPOCH), "node-a", max_attempts=3)
    original = api.request_json

    async def someone_always_writes_first(method, path, **kwargs):
        answer = await original(method, path, **kwargs)
        if method == "GET":
            server.set_config_map(NAMESPACE, NAME, {"touched": str(len(server.requests))})
        return answer

    api.request_json = someone_always_writes_first
    refusal = await agent.take("ns/p")
    assert refusal.startswith(UNKNOWN) and "3 writes in a row" in refusal
    assert agent.conflicts == 3 and DATA_KEY not in server.objects("configmaps", NAMESPACE)[0]["data"]


async def test_disabled_or_without_api_it_costs_nothing(server, api):
    server.set_config_map(NAMESPACE, NAME, {})
    off = ClusterEvictionBudget(api, settings=ClusterBudget(enabled=False), namespace=NAMESPACE, identity="n")
    assert await off.take("ns/p") is None
    assert server.requests == []
    no_api = ClusterEvictionBudget(None, settings=ClusterBudget(enabled=True), namespace=NAMESPACE, identity="n")
    assert await no_api.take("ns/p") is None


async def test_the_write_keeps_the_objects_other_keys_and_labels(server, api):
    created = server.set_config_map(NAMESPACE, NAME, {"note": "kept"})
    created["metadata"]["labels"] = {"app.kubernetes.io/name": "gpu-watchdog"}
    server.store.update(CONFIGMAPS, created)
    assert await budget(api, SimClock(epoch=EPOCH), "node-a").take("ns/p") is None
    [config_map] = server.objects("configmaps", NAMESPACE)
    assert config_map["data"]["note"] == "kept"
    assert config_map["metadata"]["labels"] == {"app.kubernetes.io/name": "gpu-watchdog"}
    assert [entry["by"] for entry in stored(server)] == ["node-a"]
