"""The evictor against an in-memory EvictionApi: modes, every reply, kill switch, counts, audit lines and Events."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field, replace

import pytest

from action_builders import attribution, finding, pod, warmed_stage
from watchdog.action import AuditLog, Evictor, Pacer, decide
from watchdog.config.action import ActionPolicy
from watchdog.model import EvictionResult as R
from watchdog.model import FindingKind as K
from watchdog.model import Mode, PodInfo, PodRef
from watchdog.testbed import SimClock


@dataclass
class Reply:
    result: R
    http_status: int | None = 201
    message: str = ""
    retry_after: float | None = None


@dataclass
class RecordingApi:
    """Answers every eviction with `answer` and records calls."""

    answer: Reply = field(default_factory=lambda: Reply(R.EVICTED))
    evictions: list = field(default_factory=list)
    events: list = field(default_factory=list)
    raise_on_evict: bool = False
    pods: dict = field(default_factory=dict)  # "ns/name" → PodInfo (or None: gone) the re-read before a send gets
    gets: list = field(default_factory=list)

    async def get_pod(self, namespace: str, name: str):
        """By default the pod as action_builders.pod() made it: live, unprotected, the same uid."""
        self.gets.append(f"{namespace}/{name}")
        default = PodInfo(uid=f"uid-{namespace}-{name}", namespace=namespace, name=name)
        return self.pods.get(f"{namespace}/{name}", default)

    async def evict(self, pod: PodRef, *, dry_run: bool, grace_seconds=None):
        self.evictions.append((pod.key, dry_run, grace_seconds))
        if self.raise_on_evict:
            raise RuntimeError("boom")
        if dry_run and self.answer.result is R.EVICTED:
            return Reply(R.DRY_RUN)
        return self.answer

    async def record_event(self, pod, *, reason, message, type="Warning", action="Evict", component, host,
                           tenant=None, owner_kind=None):
        self.events.append({"pod": pod.key, "reason": reason, "message": message, "type": type, "host": host,
                            "tenant": tenant, "owner_kind": owner_kind})
        return True


NOW = 1_000.0


@pytest.fixture
def world():
    culprit, victim = pod("batch", ns="b", priority=1), pod("web", priority=100)
    findings = [finding(culprit=culprit, victims=(victim,), since=0.0)]
    return findings, attribution(culprit, victim)


class Gate:
    """A kill switch whose state the test sets (KillSwitch's own behaviour is tested in test_action_killswitch)."""

    def __init__(self, on: bool = False) -> None:
        self.switched_on = on
        self.confirms = 0

    async def confirm(self) -> str | None:
        self.confirms += 1
        return "kill switch is on" if self.switched_on else None


def stage(mode: str, api, *, kill_switch=None, **policy):
    """A stage whose agent started long enough before the clock's 1 000 s for its bucket (empty at process start) to
    have filled."""
    stream = io.StringIO()
    p = ActionPolicy.model_validate({"mode": mode, "interference": {"for_seconds": 0}, **policy})
    s, clock = warmed_stage(p, now=NOW, api=api, audit=AuditLog(stream=stream), node="node-1", kill_switch=kill_switch)
    return s, stream, clock


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


async def test_observe_sends_nothing(world):
    api = RecordingApi()
    s, stream, _ = stage("observe", api)
    outcomes = (await s.run_cycle(*world)).outcomes
    assert [o.result for o in outcomes] == [R.OBSERVED] and api.evictions == [] and api.events == []
    assert s.counts == {("observed", "interference", "b"): 1}
    assert lines(stream)[0]["result"] == "observed"


async def test_dry_run_sends_only_dry_run_and_records_event(world):
    api = RecordingApi()
    s, stream, _ = stage("dry-run", api, grace_seconds=15)
    outcomes = (await s.run_cycle(*world)).outcomes
    assert api.evictions == [("b/batch", True, 15)]
    assert outcomes[0].result is R.DRY_RUN and outcomes[0].mode is Mode.DRY_RUN
    assert api.events[0]["reason"] == "GpuWatchdogDryRun" and api.events[0]["host"] == "node-1"


@pytest.mark.parametrize(
    ("reply", "expected", "event"),
    [
        (Reply(R.EVICTED, 201), R.EVICTED, "GpuWatchdogEvicted"),
        (Reply(R.BLOCKED_PDB, 429, "disruption budget"), R.BLOCKED_PDB, "GpuWatchdogEvictionBlocked"),
        (Reply(R.BLOCKED, 201, "more than one PodDisruptionBudget"), R.BLOCKED, "GpuWatchdogEvictionBlocked"),
        (Reply(R.GONE, 404), R.GONE, None),
        # a failed attempt gets a GpuWatchdogEvictionFailed Event
        (Reply(R.ERROR, 403), R.ERROR, "GpuWatchdogEvictionFailed"),
        (Reply(R.ERROR, 500), R.ERROR, "GpuWatchdogEvictionFailed"),
        # a dry-run answer to a real eviction is never counted as done
        (Reply(R.DRY_RUN, 201), R.ERROR, "GpuWatchdogEvictionFailed"),
    ],
)
async def test_enforce_maps_every_reply(world, reply, expected, event):
    api = RecordingApi(answer=reply)
    s, stream, _ = stage("enforce", api)
    outcomes = (await s.run_cycle(*world)).outcomes
    assert api.evictions == [("b/batch", False, None)]
    assert outcomes[0].result is expected and outcomes[0].http_status == reply.http_status
    assert [e["reason"] for e in api.events] == ([event] if event else [])
    assert s.counts == {(expected.value, "interference", "b"): 1}
    assert len(lines(stream)) == 1


async def test_errors_back_off_instead_of_storming(world):
    api = RecordingApi(answer=Reply(R.ERROR, 500))
    s, stream, clock = stage("enforce", api, node_evictions_per_minute=600, node_eviction_burst=10)
    await s.run_cycle(*world)
    for step in (1, 10, 29):
        clock.set(1_000.0 + step)
        assert [o.result for o in (await s.run_cycle(*world)).outcomes] in ([R.COOLDOWN], [R.RATE_LIMITED])
    assert len(api.evictions) == 1
    clock.set(1_030.0)
    await s.run_cycle(*world)
    assert len(api.evictions) == 2
    clock.set(1_031.0)
    assert [o.result for o in (await s.run_cycle(*world)).outcomes] in ([R.COOLDOWN], [R.RATE_LIMITED])


async def test_raising_client_is_an_error_not_a_crash(world):
    api = RecordingApi(raise_on_evict=True)
    s, _, _ = stage("enforce", api)
    assert [o.result for o in (await s.run_cycle(*world)).outcomes] == [R.ERROR]


async def test_kill_switch_pauses_and_costs_no_token(world):
    api = RecordingApi()
    gate = Gate(on=True)
    s, _, _ = stage("enforce", api, kill_switch=gate)
    assert [o.result for o in (await s.run_cycle(*world)).outcomes] == [R.PAUSED]
    assert api.evictions == [] and api.events == []
    gate.switched_on = False
    assert [o.result for o in (await s.run_cycle(*world)).outcomes] == [R.EVICTED]


async def test_no_api_is_an_error(world):
    s, _, _ = stage("enforce", None)
    assert [o.result for o in (await s.run_cycle(*world)).outcomes] == [R.ERROR]


async def test_audit_line_content(world):
    api = RecordingApi()
    s, stream, _ = stage("enforce", api)
    await s.run_cycle(*world)
    line = lines(stream)[0]
    assert line["node"] == "node-1" and line["mode"] == "enforce" and line["result"] == "evicted"
    assert line["pod"] == {"namespace": "b", "name": "batch", "uid": "uid-b-batch"} and line["priority"] == 1
    assert line["finding_kind"] == "interference" and line["finding_key"] == "interference/gpu-0"
    assert line["evidence"] == {"power_watts": 690.0}
    assert line["protects"] == [{"namespace": "team-a", "name": "web", "priority": 100}]
    assert line["timestamp"].startswith("1970-01-01T00:16:40") and line["http_status"] == 201


async def test_every_decision_is_counted_and_audited_once():
    api = RecordingApi()
    s, stream, _ = stage("enforce", api)
    c, v, sys_pod = pod("c", ns="b"), pod("v", priority=100), pod("s", ns="kube-system")
    fs = [
        finding(culprit=c, victims=(v,), key="ok"),
        finding(culprit=None, victims=(v,), key="nopod"),
        finding(culprit=sys_pod, victims=(v,), key="sys"),
    ]
    outcomes = (await s.run_cycle(fs, attribution(c, v, sys_pod))).outcomes
    assert [o.result for o in outcomes] == [R.EVICTED, R.PROTECTED]  # the pod-less decision has no outcome
    assert [(l["finding_key"], l["result"]) for l in lines(stream)] == [
        ("ok", "evicted"), ("nopod", "unsafe"), ("sys", "protected")
    ]
    assert sum(s.counts.values()) == 3 and s.counts[("unsafe", "interference", "")] == 1
    assert len(api.events) == 1


async def test_set_policy_switches_mode(world):
    api = RecordingApi()
    s, _, clock = stage("observe", api)
    await s.run_cycle(*world)
    s.set_policy(ActionPolicy.model_validate({"mode": "enforce", "interference": {"for_seconds": 0}}))
    clock.advance(10_000)
    assert [o.result for o in (await s.run_cycle(*world)).outcomes] == [R.EVICTED]


async def test_evictor_directly_with_prepared_decisions(world):
    api = RecordingApi()
    policy = ActionPolicy(mode=Mode.ENFORCE)
    evictor = Evictor(api, policy=policy, pacer=Pacer(policy), audit=AuditLog(stream=io.StringIO()),
                      clock=SimClock(NOW), node="n", kill_switch=None)
    decisions = decide(world[0], world[1], policy=policy, now=0.0)
    assert [o.result for o in (await evictor.act(decisions)).outcomes] == [R.EVICTED]


def test_audit_log_sinks(tmp_path, caplog):
    import logging

    with pytest.raises(ValueError):
        AuditLog()
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path=path)
    log.write({"a": 1})
    log.write({"a": 2})
    assert [json.loads(x)["a"] for x in path.read_text().splitlines()] == [1, 2]
    broken = AuditLog(path=tmp_path / "missing-dir" / "x.jsonl")
    broken.write({"a": 1})
    assert broken.failures == 1
    caplog.set_level(logging.INFO, logger="gpu_watchdog.audit")
    AuditLog.from_setting(None).write({"b": 2})
    assert '"b": 2' in caplog.text


async def test_a_standing_refusal_is_counted_and_audited_once_per_change():
    culprit, victim = pod("batch", ns="b", priority=1), pod("web", priority=100)
    world = ([finding(culprit=culprit, victims=(victim,), since=1_000.0)], attribution(culprit, victim))
    api = RecordingApi()
    s, stream, clock = stage("enforce", api, interference={"for_seconds": 60})
    for _ in range(5):  # the finding waits out its `for`: pending every cycle, but one decision
        await s.run_cycle(*world)
        clock.advance(1)
    assert s.counts == {("pending", "interference", "b"): 1}
    assert [line["result"] for line in lines(stream)] == ["pending"]
    clock.advance(60)
    await s.run_cycle(*world)
    assert api.evictions == [("b/batch", False, None)]
    assert s.counts[("evicted", "interference", "b")] == 1
    await s.run_cycle([], world[1])  # the finding is resolved: forgotten
    await s.run_cycle(*world)  # and when it comes back, its (new) refusal counts again
    assert [line["result"] for line in lines(stream)][-1] != "evicted"
    assert len(lines(stream)) == 3


async def test_an_xid_drains_standing_refusals_are_counted_once_per_pod():
    """One finding, several pods (an Xid drain): each pod's standing refusal is its own, counted once."""
    a, b, guarded = pod("a", ns="b"), pod("b", ns="b"), pod("g", ns="kube-system")
    fs = [finding(K.XID, culprit=a, victims=(b, guarded), key="xid/gpu-0", since=1_000.0)]
    s, stream, clock = stage("enforce", RecordingApi(), xid={"enabled": True, "drain_all": True, "for_seconds": 60})
    for _ in range(4):
        await s.run_cycle(fs, attribution(a, b, guarded))
        clock.advance(1)
    assert s.counts == {("pending", "xid", "b"): 2, ("protected", "xid", "kube-system"): 1}
    assert sorted((line["pod"]["name"], line["result"]) for line in lines(stream)) == [
        ("a", "pending"), ("b", "pending"), ("g", "protected")
    ]


async def test_a_failure_streak_is_one_event_and_a_new_streak_another(world):
    api = RecordingApi(answer=Reply(R.ERROR, 500, "etcd unavailable"))
    s, _, clock = stage("enforce", api, node_evictions_per_minute=600, node_eviction_burst=5,
                        pod_cooldown_seconds=0, tenant_cooldown_seconds=0)
    for step in (0, 30, 90):  # each one past the doubling backoff: three failed attempts
        clock.set(1_000.0 + step)
        assert [o.result for o in (await s.run_cycle(*world)).outcomes] == [R.ERROR]
    assert len(api.evictions) == 3
    assert [(e["reason"], e["type"]) for e in api.events] == [("GpuWatchdogEvictionFailed", "Warning")]
    assert "could not evict b/batch" in api.events[0]["message"] and "etcd unavailable" in api.events[0]["message"]
    api.answer = Reply(R.BLOCKED_PDB, 429)  # the streak ends with an answer that is not an error…
    clock.set(1_000.0 + 210)
    assert [o.result for o in (await s.run_cycle(*world)).outcomes] == [R.BLOCKED_PDB]
    api.answer = Reply(R.DRY_RUN, 201)  # …and a dry-run answer to an eviction starts a new one
    clock.set(1_000.0 + 450)
    assert [o.result for o in (await s.run_cycle(*world)).outcomes] == [R.ERROR]
    assert [e["reason"] for e in api.events] == [
        "GpuWatchdogEvictionFailed", "GpuWatchdogEvictionBlocked", "GpuWatchdogEvictionFailed"
    ]


async def test_a_stopped_decision_writes_no_event():
    culprit, victim = pod("batch", ns="b", priority=1), pod("web", priority=100)
    world = ([finding(culprit=culprit, victims=(victim,), since=1_000.0)], attribution(culprit, victim))
    api = RecordingApi()
    s, _, _ = stage("enforce", api, interference={"for_seconds": 600})
    assert [o.result for o in (await s.run_cycle(*world)).outcomes] == [R.PENDING]
    assert api.events == []


async def test_api_throttling_holds_every_send_for_its_retry_after(world):
    api = RecordingApi(answer=Reply(R.RATE_LIMITED, 429, "too many requests", retry_after=120.0))
    s, _, clock = stage("enforce", api, node_evictions_per_minute=600, node_eviction_burst=5)
    assert [o.result for o in (await s.run_cycle(*world)).outcomes] == [R.RATE_LIMITED]
    assert api.events == [] and s.pacer.tokens(clock.now()) == 4.0  # it was a real request: it took a token
    api.answer = Reply(R.EVICTED)
    other, victim = pod("other", ns="c", priority=1), pod("web", priority=100)
    elsewhere = ([finding(culprit=other, victims=(victim,), key="interference/gpu-1")], attribution(other, victim))
    clock.advance(119)
    outcomes = (await s.run_cycle(*elsewhere)).outcomes
    assert [o.result for o in outcomes] == [R.RATE_LIMITED] and "throttled" in outcomes[0].detail
    clock.advance(1)
    assert [o.result for o in (await s.run_cycle(*elsewhere)).outcomes] == [R.EVICTED]
    assert [o.result for o in (await s.run_cycle(*world)).outcomes] == [R.EVICTED]  # its own backoff honoured Retry-After too
    assert len(api.evictions) == 3


async def test_a_gone_pod_is_not_posted_again_until_forgotten():
    culprit, victim = pod("batch", ns="b", priority=1), pod("web", priority=100)
    world = ([finding(culprit=culprit, victims=(victim,))], attribution(culprit, victim))
    api = RecordingApi(answer=Reply(R.GONE, 404))
    s, _, clock = stage("enforce", api, tenant_cooldown_seconds=0, node_evictions_per_minute=600,
                        node_eviction_burst=5, evicted_memory_seconds=300)
    results = []
    for _ in range(20):  # the pod cache still lists the pod the API server no longer has
        results.append([o.result for o in (await s.run_cycle(*world)).outcomes][0])
        clock.advance(1)
    assert results == [R.GONE] * 20 and len(api.evictions) == 1
    assert s.counts == {("gone", "interference", "b"): 1}  # the attempt; the same result standing is not recounted
    clock.set(1_000.0 + 300)  # evicted_memory_seconds after the 404: forgotten, asked again
    assert [o.result for o in (await s.run_cycle(*world)).outcomes] == [R.GONE] and len(api.evictions) == 2
    replacement = replace(culprit, uid="uid-of-the-replacement")
    renewed = ([finding(culprit=replacement, victims=(victim,))], attribution(replacement, victim))
    api.answer = Reply(R.EVICTED)
    api.pods["b/batch"] = replacement  # what the API server now has under that name
    clock.advance(1)
    assert [o.result for o in (await s.run_cycle(*renewed)).outcomes] == [R.EVICTED]  # another pod, same name: not "gone"
