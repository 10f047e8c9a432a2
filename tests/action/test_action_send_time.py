"""What changes between a decision and its send is honoured: a policy reload during the kill-switch read, and the
pod as the API server has it right before the request, in-memory and over HTTP."""

from __future__ import annotations

import io

import pytest

from action_builders import attribution, finding, pod, warmed_stage
from watchdog.action import ActionStage, AuditLog
from watchdog.config.action import ActionPolicy
from watchdog.testbed.cluster.apiserver import FakeApiServer
from watchdog.kube.client import KubeApi
from watchdog.kube.eviction import KubeEvictions
from watchdog.kube.pods import pod_info
from watchdog.model import Attribution, PodIndex, PodInfo
from watchdog.model import EvictionResult as R
from watchdog.testbed import SimClock

ENFORCE = {"mode": "enforce", "interference": {"for_seconds": 0}}
NOW = 1_000.0


class Reply:
    def __init__(self, result: R) -> None:
        self.result, self.http_status, self.message, self.retry_after = result, 201, "", None


class Api:
    """Evictions and re-reads in memory; `pods` is what the API server has now (default: the builders' pod)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bool]] = []
        self.gets = 0
        self.pods: dict[str, PodInfo | None] = {}
        self.get_raises = False

    async def get_pod(self, namespace: str, name: str):
        self.gets += 1
        if self.get_raises:
            raise ConnectionError("apiserver unreachable")
        return self.pods.get(f"{namespace}/{name}", PodInfo(uid=f"uid-{namespace}-{name}", namespace=namespace,
                                                            name=name))

    async def evict(self, p, *, dry_run: bool, grace_seconds=None):
        self.sent.append((p.key, dry_run))
        return Reply(R.DRY_RUN if dry_run else R.EVICTED)

    async def record_event(self, p, **fields):
        return True


class ReloadingGate:
    """A kill switch whose read (one GET) is where an operator's policy reload lands, as it can in the agent: the
    PolicyWatcher runs in its own task while the evictor awaits the ConfigMap."""

    def __init__(self) -> None:
        self.switched_on = False
        self.during_read = None

    async def confirm(self) -> str | None:
        if self.during_read is not None:
            self.during_read()
        return None


def world():
    culprit, victim = pod("hog", ns="b", priority=0), pod("v", ns="a", priority=100)
    return [finding(culprit=culprit, victims=(victim,))], attribution(culprit, victim)


def stage(api, gate=None, **policy) -> tuple[ActionStage, SimClock]:
    p = ActionPolicy.model_validate({**ENFORCE, **policy})
    # The agent started a minute ago: its bucket (empty at start) has a token.
    return warmed_stage(p, now=NOW, warm_up=60.0, api=api, audit=AuditLog(stream=io.StringIO()), node="n",
                        kill_switch=gate)


# ------------------------------------------------------------------ a reload while the send awaits


async def test_a_reload_to_observe_during_the_switch_read_sends_nothing():
    api, gate = Api(), ReloadingGate()
    s, _ = stage(api, gate)
    gate.during_read = lambda: s.set_policy(ActionPolicy.model_validate({**ENFORCE, "mode": "observe"}))
    outcomes = (await s.run_cycle(*world())).outcomes
    assert [o.result for o in outcomes] == [R.OBSERVED] and "reloaded" in outcomes[0].detail
    assert api.sent == []


async def test_a_reload_protecting_the_namespace_during_the_switch_read_sends_nothing():
    api, gate = Api(), ReloadingGate()
    s, clock = stage(api, gate)
    protect_b = ActionPolicy.model_validate({**ENFORCE, "protected_namespaces": ["kube-system", "b"]})
    gate.during_read = lambda: s.set_policy(protect_b)
    outcomes = (await s.run_cycle(*world())).outcomes
    assert [(o.result, o.detail) for o in outcomes] == [(R.PROTECTED, "re-checked before sending: namespace b is "
                                                                      "protected")]
    assert api.sent == []
    clock.advance(1)  # the next cycle decides under the new policy: refused before any read
    gate.during_read = None
    assert [o.result for o in (await s.run_cycle(*world())).outcomes] == [R.PROTECTED] and api.gets == 1


async def test_a_reload_never_escalates_a_send_in_flight():
    api, gate = Api(), ReloadingGate()
    s, _ = stage(api, gate, mode="dry-run")
    gate.during_read = lambda: s.set_policy(ActionPolicy.model_validate(ENFORCE))
    assert [(o.result, o.mode.value) for o in (await s.run_cycle(*world())).outcomes] == [(R.DRY_RUN, "dry-run")]
    assert api.sent == [("b/hog", True)]


async def test_a_reload_during_the_pod_re_read_is_honoured_too():
    api = Api()
    s, _ = stage(api, None)
    original = api.get_pod

    async def get_pod_while_reloading(namespace, name):
        s.set_policy(ActionPolicy.model_validate({**ENFORCE, "priority_floor": 0}))  # the pod's 0 is now protected
        return await original(namespace, name)

    api.get_pod = get_pod_while_reloading
    outcomes = (await s.run_cycle(*world())).outcomes
    assert [o.result for o in outcomes] == [R.PROTECTED] and "floor 0" in outcomes[0].detail
    assert api.sent == []


# ------------------------------------------------------------------ the pod re-read right before a send


@pytest.mark.parametrize(
    ("now_on_the_server", "expected", "words"),
    [
        (None, R.GONE, "no longer exists"),
        (PodInfo(uid="uid-of-a-replacement", namespace="b", name="hog"), R.GONE, "was replaced"),
        (PodInfo(uid="uid-b-hog", namespace="b", name="hog", deleting=True), R.ALREADY_EVICTED, "terminating"),
        (PodInfo(uid="uid-b-hog", namespace="b", name="hog", phase="Succeeded"), R.GONE, "ended"),
        (PodInfo(uid="uid-b-hog", namespace="b", name="hog", annotations={"gpu-watchdog.io/protected": "true"}),
         R.PROTECTED, "annotated"),
        (PodInfo(uid="uid-b-hog", namespace="b", name="hog", owner_kind="DaemonSet"), R.PROTECTED, "DaemonSet"),
    ],
)
async def test_the_pod_as_re_read_decides(now_on_the_server, expected, words):
    api = Api()
    api.pods["b/hog"] = now_on_the_server
    s, _ = stage(api)
    outcomes = (await s.run_cycle(*world())).outcomes
    assert [o.result for o in outcomes] == [expected] and words in outcomes[0].detail
    assert api.sent == [] and api.gets == 1


async def test_a_pod_refused_at_send_time_is_backed_off_not_re_read_every_cycle():
    api = Api()
    api.pods["b/hog"] = PodInfo(uid="uid-b-hog", namespace="b", name="hog",
                                annotations={"gpu-watchdog.io/protected": "true"})
    s, clock = stage(api, node_evictions_per_minute=600, node_eviction_burst=5)
    results = []
    for _ in range(31):  # the stale cache keeps deciding for the pod for 30 s
        results.append([o.result for o in (await s.run_cycle(*world())).outcomes][0])
        clock.advance(1)
    assert results == [R.PROTECTED] + [R.COOLDOWN] * 29 + [R.PROTECTED]
    assert api.gets == 2 and api.sent == []


async def test_a_pod_that_cannot_be_re_read_is_an_error_and_not_sent():
    api = Api()
    api.get_raises = True
    s, _ = stage(api)
    outcomes = (await s.run_cycle(*world())).outcomes
    assert [o.result for o in outcomes] == [R.ERROR] and "could not re-read" in outcomes[0].detail
    assert api.sent == []


async def test_observe_mode_reads_nothing():
    api = Api()
    s, _ = stage(api, mode="observe")
    assert [o.result for o in (await s.run_cycle(*world())).outcomes] == [R.OBSERVED] and api.gets == 0


# ------------------------------------------------------------------ over HTTP, against the fake API server


@pytest.fixture
def cluster(server: FakeApiServer, api: KubeApi):
    server.add_pod(namespace="team-b", name="batch", priority=1, labels={"app": "batch"})
    server.add_pod(namespace="team-a", name="web", priority=100)
    return server, KubeEvictions(api)


async def test_a_pod_annotated_protected_after_the_decision_is_not_evicted(cluster):
    server, kube = cluster
    culprit, victim = pod_info(server.get_pod("team-b", "batch")), pod_info(server.get_pod("team-a", "web"))
    stale = Attribution(index=PodIndex.of([culprit, victim]))  # what a stalled watch still shows
    await kube.api.request_json("PATCH", "/api/v1/namespaces/team-b/pods/batch",
                                body={"metadata": {"annotations": {"gpu-watchdog.io/protected": "true"}}},
                                content_type="application/merge-patch+json")
    s, _ = stage(kube)
    server.requests.clear()
    outcomes = (await s.run_cycle([finding(culprit=culprit, victims=(victim,))], stale)).outcomes
    assert [o.result for o in outcomes] == [R.PROTECTED] and "annotated" in outcomes[0].detail
    assert [(method, path) for method, path, _ in server.requests] == [("GET", "/api/v1/namespaces/team-b/pods/batch")]
    assert not server.get_pod("team-b", "batch")["metadata"].get("deletionTimestamp")


async def test_get_pod_reads_the_server_and_answers_none_for_a_missing_pod(cluster):
    server, kube = cluster
    found = await kube.get_pod("team-b", "batch")
    assert found is not None and found.uid == server.get_pod("team-b", "batch")["metadata"]["uid"]
    assert await kube.get_pod("team-b", "nobody") is None
    server.fail_next(status=500, path_prefix="/api/v1/namespaces/team-b/pods/batch")
    with pytest.raises(Exception, match="500"):
        await kube.get_pod("team-b", "batch")
