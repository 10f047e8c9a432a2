"""The evictor's cluster-wide budget gate: a slot right before each send (after the kill switch), a refused or
unknown budget ends the decision as rate_limited and sends nothing; then two agents against one fake API server."""

from __future__ import annotations

import io

import pytest

from action_builders import attribution, finding, pod, warmed_stage
from watchdog.action import AuditLog
from watchdog.config.action import ActionPolicy, ClusterBudget
from watchdog.kube.client import KubeApi
from watchdog.kube.eviction import KubeEvictions
from watchdog.kube.eviction_budget import ClusterEvictionBudget
from watchdog.kube.pods import pod_info
from watchdog.model import Attribution, PodIndex
from watchdog.model import EvictionResult as R
from watchdog.testbed import SimClock
from watchdog.testbed.cluster.apiserver import FakeApiServer
from test_action_evictor import Gate, RecordingApi


class Budget:
    """A budget whose answer the test sets; records the pods it was asked about."""

    def __init__(self, refusal: str | None = None, *, raises: bool = False) -> None:
        self.refusal = refusal
        self.raises = raises
        self.asked: list[str] = []

    async def take(self, pod_key: str) -> str | None:
        self.asked.append(pod_key)
        if self.raises:
            raise RuntimeError("boom")
        return self.refusal


NOW = 1_000.0


def stage(mode: str, api, *, budget, kill_switch=None, node: str = "node-1", clock: SimClock | None = None,
          **policy):
    """A stage whose bucket has filled since its start (an empty bucket at process start is pacing's business); on
    ``clock`` from its current reading when the test shares one."""
    p = ActionPolicy.model_validate({"mode": mode, "interference": {"for_seconds": 0}, **policy})
    return warmed_stage(p, now=None if clock else NOW, clock=clock, api=api, audit=AuditLog(stream=io.StringIO()),
                        node=node, kill_switch=kill_switch, budget=budget)


@pytest.fixture
def world():
    culprit, victim = pod("batch", ns="b", priority=1), pod("web", priority=100)
    return [finding(culprit=culprit, victims=(victim,), since=0.0)], attribution(culprit, victim)


async def test_a_spent_budget_sends_nothing_and_ends_as_rate_limited(world):
    api, budget = RecordingApi(), Budget("cluster eviction budget spent: 10 of 10 sends in the last 3600s")
    s, clock = stage("enforce", api, budget=budget)
    [outcome] = (await s.run_cycle(*world)).outcomes
    assert outcome.result is R.RATE_LIMITED and outcome.detail.startswith("cluster eviction budget spent")
    assert api.evictions == [] and api.gets == [] and api.events == [] and budget.asked == ["b/batch"]
    assert s.counts == {("rate_limited", "interference", "b"): 1}
    clock.advance(1)  # the refused pod is backed off: its standing decision does not ask the budget every cycle
    [again] = (await s.run_cycle(*world)).outcomes
    assert again.result is R.COOLDOWN and budget.asked == ["b/batch"] and api.evictions == []


async def test_a_budget_that_raises_is_unknown_and_sends_nothing(world):
    api, budget = RecordingApi(), Budget(raises=True)
    s, _ = stage("enforce", api, budget=budget)
    [outcome] = (await s.run_cycle(*world)).outcomes
    assert outcome.result is R.RATE_LIMITED and "cluster eviction budget unknown" in outcome.detail
    assert api.evictions == []


async def test_dry_run_takes_a_slot_and_observe_takes_none(world):
    api, budget = RecordingApi(), Budget()
    s, _ = stage("dry-run", api, budget=budget)
    assert [o.result for o in (await s.run_cycle(*world)).outcomes] == [R.DRY_RUN]
    assert budget.asked == ["b/batch"] and api.evictions == [("b/batch", True, None)]
    observing, observed = RecordingApi(), Budget()
    s, _ = stage("observe", observing, budget=observed)
    assert [o.result for o in (await s.run_cycle(*world)).outcomes] == [R.OBSERVED]
    assert observed.asked == []


class PausedAtSendTime(Gate):
    """Not paused when the decision is made; paused by the time the send is about to go."""

    async def confirm(self) -> str | None:
        self.confirms += 1
        return "kill switch is on"


async def test_the_kill_switch_is_asked_first(world):
    api, budget, gate = RecordingApi(), Budget(), PausedAtSendTime()
    s, _ = stage("enforce", api, budget=budget, kill_switch=gate)
    assert [o.result for o in (await s.run_cycle(*world)).outcomes] == [R.PAUSED]
    assert gate.confirms == 1 and budget.asked == [] and api.evictions == []


@pytest.fixture
def cluster(server: FakeApiServer, api: KubeApi):
    server.set_config_map("gpu-watchdog", "gpu-watchdog-eviction-budget", {})
    for node in ("node-1", "node-2"):
        server.add_pod(namespace="team-b", name=f"batch-{node}", node=node, priority=1)
        server.add_pod(namespace="team-a", name=f"web-{node}", node=node, priority=100)
    return server, api


def node_world(server: FakeApiServer, node: str):
    culprit = pod_info(server.get_pod("team-b", f"batch-{node}"))
    victim = pod_info(server.get_pod("team-a", f"web-{node}"))
    return [finding(culprit=culprit, victims=(victim,), since=0.0)], Attribution(index=PodIndex.of([culprit, victim]))


async def test_two_agents_share_one_ceiling_through_the_api_server(cluster):
    server, api = cluster
    clock = SimClock(1_800_000_000.0)  # one wall clock: the budget's and both agents'
    settings = ClusterBudget(enabled=True, max_evictions=1, window_seconds=3600)
    stages = {}
    for node in ("node-1", "node-2"):
        budget = ClusterEvictionBudget(api, settings=settings, namespace="gpu-watchdog", identity=node,
                                       wall_clock=clock)
        stages[node], _ = stage("enforce", KubeEvictions(api), budget=budget, node=node, clock=clock)
    [first] = (await stages["node-1"].run_cycle(*node_world(server, "node-1"))).outcomes
    [second] = (await stages["node-2"].run_cycle(*node_world(server, "node-2"))).outcomes
    assert first.result is R.EVICTED
    assert second.result is R.RATE_LIMITED and "gpu-watchdog/gpu-watchdog-eviction-budget" in second.detail
    posts = [path for method, path, _ in server.requests if method == "POST" and path.endswith("/eviction")]
    assert posts == ["/api/v1/namespaces/team-b/pods/batch-node-1/eviction"]
    assert server.get_pod("team-b", "batch-node-2") is not None
