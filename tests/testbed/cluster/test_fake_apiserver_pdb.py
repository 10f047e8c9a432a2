"""The fake's PodDisruptionBudget answers follow the real disruption controller and eviction subresource:
not-ready pods, expectedPods that outlive an eviction, status.disruptedPods, and IsPodReady (raw HTTP)."""

from __future__ import annotations

import aiohttp

from tests.fake_api import FakeApi
from watchdog.testbed import SimClock


async def evict(server, name, *, delete_options=None, namespace="ml"):
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": delete_options or {}}
    async with aiohttp.ClientSession() as session:
        url = f"{server.url}/api/v1/namespaces/{namespace}/pods/{name}/eviction"
        async with session.post(url, json=body) as resp:
            return resp.status, await resp.json()


async def pdb_status(server, name, namespace="ml") -> dict:
    async with aiohttp.ClientSession() as session:
        url = f"{server.url}/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}"
        async with session.get(url) as resp:
            assert resp.status == 200
            return (await resp.json())["status"]


def budget(status: dict) -> tuple[int, int, int, int]:
    return (status["expectedPods"], status["desiredHealthy"], status["currentHealthy"], status["disruptionsAllowed"])


async def test_not_ready_pod_under_min_available_zero_is_refused_by_the_empty_budget(server):
    # eviction.go lets a not-ready pod skip the budget only when DesiredHealthy > 0; with minAvailable: 0 it goes
    # through checkAndDecrement, where disruptionsAllowed = currentHealthy (0) - desiredHealthy (0) = 0.
    server.add_pod(namespace="ml", name="sick", labels={"app": "x"}, ready=False)
    server.add_pdb(namespace="ml", name="zero", selector={"app": "x"}, min_available=0)
    assert budget(await pdb_status(server, "zero")) == (1, 0, 0, 0)
    status, body = await evict(server, "sick")
    assert (status, body["reason"]) == (429, "TooManyRequests")
    assert "needs 0 healthy pods and has 0 currently" in body["details"]["causes"][0]["message"]
    server.set_pod_ready("ml", "sick", True)  # a Ready pod has a disruption to spend
    assert (await evict(server, "sick"))[0] == 201


async def test_single_replica_pdbs_and_a_not_ready_pod(server):
    server.add_pod(namespace="ml", name="one", labels={"app": "one"}, ready=False)
    server.add_pdb(namespace="ml", name="max1", selector={"app": "one"}, max_unavailable=1)  # desiredHealthy 0
    assert (await evict(server, "one"))[0] == 429
    server.add_pod(namespace="ml", name="two", labels={"app": "two"}, ready=False)
    server.add_pdb(namespace="ml", name="min1", selector={"app": "two"}, min_available=1)  # 0 healthy of 1
    assert (await evict(server, "two"))[0] == 429
    server.add_pod(namespace="ml", name="three", labels={"app": "three"}, ready=False)
    server.add_pdb(namespace="ml", name="always", selector={"app": "three"}, max_unavailable=1,
                   unhealthy_pod_eviction_policy="AlwaysAllow")
    assert (await evict(server, "three"))[0] == 201


async def test_not_ready_pod_goes_without_a_disruption_while_the_budget_is_met(server):
    for name, ready in (("a", True), ("b", True), ("c", False)):
        server.add_pod(namespace="ml", name=name, labels={"app": "x"}, ready=ready)
    server.add_pdb(namespace="ml", name="two", selector={"app": "x"}, min_available=2)
    assert (await evict(server, "a"))[0] == 429  # 2 healthy, 2 needed: no disruption for a Ready pod
    assert (await evict(server, "c"))[0] == 201  # 2 >= 2 and desiredHealthy > 0: the unready pod may go


async def test_readiness_is_the_ready_condition_not_the_phase(server):
    server.add_pod(namespace="ml", name="a", labels={"app": "x"})
    server.add_pod(namespace="ml", name="b", labels={"app": "x"}, phase="Unknown")  # Ready condition True
    server.add_pdb(namespace="ml", name="one", selector={"app": "x"}, min_available=1)
    assert budget(await pdb_status(server, "one")) == (2, 1, 2, 1)  # podutil.IsPodReady counts b
    assert (await evict(server, "a"))[0] == 201


async def test_a_second_eviction_waits_for_a_ready_replacement(fake_api: FakeApi):
    server = await fake_api.server(instant_deletes=True)
    for index in range(3):
        server.add_pod(namespace="ml", name=f"w{index}", labels={"app": "train"})
    server.add_pdb(namespace="ml", name="one", selector={"app": "train"}, max_unavailable=1)
    assert (await evict(server, "w0"))[0] == 201
    assert server.get_pod("ml", "w0") is None
    # The workload still wants 3 (expectedPods does not shrink with the eviction): 2 healthy, 2 needed.
    assert budget(await pdb_status(server, "one")) == (3, 2, 2, 0)
    status, body = await evict(server, "w1")
    assert status == 429 and body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    server.add_pod(namespace="ml", name="w3", labels={"app": "train"}, ready=False)  # the replacement starts
    assert (await evict(server, "w1"))[0] == 429
    server.set_pod_ready("ml", "w3", True)
    assert budget(await pdb_status(server, "one")) == (3, 2, 3, 1)
    assert (await evict(server, "w1"))[0] == 201


async def test_a_graceful_eviction_still_counts_against_the_budget_once_the_pod_is_gone(server):
    for index in range(3):
        server.add_pod(namespace="ml", name=f"w{index}", labels={"app": "train"})
    server.add_pdb(namespace="ml", name="one", selector={"app": "train"}, max_unavailable=1)
    assert (await evict(server, "w0"))[0] == 201  # terminating
    assert (await evict(server, "w1"))[0] == 429
    assert server.finish_deletions() == 1
    assert (await evict(server, "w1"))[0] == 429  # gone, not replaced
    assert budget(await pdb_status(server, "one")) == (3, 2, 2, 0)


async def test_expected_pods_can_be_given_as_the_workload_scale(server):
    for index in range(3):
        server.add_pod(namespace="ml", name=f"w{index}", labels={"app": "train"})
    server.add_pdb(namespace="ml", name="one", selector={"app": "train"}, max_unavailable=1, expected=5)
    assert budget(await pdb_status(server, "one")) == (5, 4, 3, 0)  # two replicas not even scheduled
    assert (await evict(server, "w0"))[0] == 429
    server.set_pdb_expected("ml", "one", 3)  # the workload scaled down
    assert (await evict(server, "w0"))[0] == 201


async def test_evicted_pod_is_recorded_in_disrupted_pods_until_it_goes_or_times_out(fake_api: FakeApi):
    clock = SimClock(1_800_000_000.0)
    server = await fake_api.server(clock=clock)
    pods = [server.add_pod(namespace="ml", name=f"w{i}", labels={"app": "x"}) for i in range(3)]
    server.add_pdb(namespace="ml", name="one", selector={"app": "x"}, min_available=1)
    # The budget is spent (checkAndDecrement writes disruptedPods) before the delete, whose uid precondition
    # then fails: the pod stays, but the controller does not count it healthy for DeletionTimeout (2 min).
    status, body = await evict(server, "w0", delete_options={"preconditions": {"uid": "not-w0"}})
    assert status == 409
    pdb = await pdb_status(server, "one")
    assert list(pdb["disruptedPods"]) == ["w0"]
    assert budget(pdb) == (3, 1, 2, 1)
    clock.advance(121)
    pdb = await pdb_status(server, "one")
    assert "disruptedPods" not in pdb and budget(pdb) == (3, 1, 3, 2)
    uid = pods[1]["metadata"]["uid"]
    assert (await evict(server, "w1", delete_options={"preconditions": {"uid": uid}}))[0] == 201
    assert "disruptedPods" not in await pdb_status(server, "one")  # terminating: dropped from the map
