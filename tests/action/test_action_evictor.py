"""The evictor against an in-memory EvictionApi: modes, every reply, kill switch, counts, audit lines and Events."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field

import pytest

from action_builders import attribution, finding, pod
from watchdog.action import ActionStage, AuditLog, Evictor, Pacer, decide
from watchdog.config.action import ActionPolicy
from watchdog.model import EvictionResult as R
from watchdog.model import Mode, PodRef


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

    async def evict(self, pod: PodRef, *, dry_run: bool, grace_seconds=None):
        self.evictions.append((pod.key, dry_run, grace_seconds))
        if self.raise_on_evict:
            raise RuntimeError("boom")
        if dry_run and self.answer.result is R.EVICTED:
            return Reply(R.DRY_RUN)
        return self.answer

    async def record_event(self, pod, *, reason, message, type="Warning", action="Evict", component, host):
        self.events.append({"pod": pod.key, "reason": reason, "message": message, "type": type, "host": host})
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world():
    culprit, victim = pod("batch", ns="b", priority=1), pod("web", priority=100)
    findings = [finding(culprit=culprit, victims=(victim,), since=0.0)]
    return findings, attribution(culprit, victim)


def stage(mode: str, api, *, paused=lambda: False, **policy):
    stream = io.StringIO()
    clock = Clock()
    p = ActionPolicy.model_validate({"mode": mode, "interference": {"for_seconds": 0}, **policy})
    s = ActionStage(p, api, clock=clock, audit=AuditLog(stream=stream), node="node-1", paused=paused)
    return s, stream, clock


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


async def test_observe_sends_nothing(world):
    api = RecordingApi()
    s, stream, _ = stage("observe", api)
    outcomes = await s.run_cycle(*world)
    assert [o.result for o in outcomes] == [R.OBSERVED] and api.evictions == [] and api.events == []
    assert s.counts == {("observed", "interference", "b"): 1}
    assert lines(stream)[0]["result"] == "observed"


async def test_dry_run_sends_only_dry_run_and_records_event(world):
    api = RecordingApi()
    s, stream, _ = stage("dry-run", api, grace_seconds=15)
    outcomes = await s.run_cycle(*world)
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
        (Reply(R.ERROR, 403), R.ERROR, None),
        (Reply(R.ERROR, 500), R.ERROR, None),
        (Reply(R.DRY_RUN, 201), R.ERROR, None),  # a dry-run answer to a real eviction is never counted as done
    ],
)
async def test_enforce_maps_every_reply(world, reply, expected, event):
    api = RecordingApi(answer=reply)
    s, stream, _ = stage("enforce", api)
    outcomes = await s.run_cycle(*world)
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
        clock.now = 1_000.0 + step
        assert [o.result for o in await s.run_cycle(*world)] in ([R.COOLDOWN], [R.RATE_LIMITED])
    assert len(api.evictions) == 1
    clock.now = 1_030.0
    await s.run_cycle(*world)
    assert len(api.evictions) == 2
    clock.now = 1_031.0
    assert [o.result for o in await s.run_cycle(*world)] in ([R.COOLDOWN], [R.RATE_LIMITED])


async def test_raising_client_is_an_error_not_a_crash(world):
    api = RecordingApi(raise_on_evict=True)
    s, _, _ = stage("enforce", api)
    assert [o.result for o in await s.run_cycle(*world)] == [R.ERROR]


async def test_kill_switch_pauses_and_costs_no_token(world):
    api = RecordingApi()
    paused = [True]
    s, _, _ = stage("enforce", api, paused=lambda: paused[0])
    assert [o.result for o in await s.run_cycle(*world)] == [R.PAUSED]
    assert api.evictions == [] and api.events == []
    paused[0] = False
    assert [o.result for o in await s.run_cycle(*world)] == [R.EVICTED]


async def test_no_api_is_an_error(world):
    s, _, _ = stage("enforce", None)
    assert [o.result for o in await s.run_cycle(*world)] == [R.ERROR]


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
    outcomes = await s.run_cycle(fs, attribution(c, v, sys_pod))
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
    clock.now += 10_000
    assert [o.result for o in await s.run_cycle(*world)] == [R.EVICTED]


async def test_evictor_directly_with_prepared_decisions(world):
    api = RecordingApi()
    policy = ActionPolicy(mode=Mode.ENFORCE)
    evictor = Evictor(api, policy=policy, pacer=Pacer(policy), audit=AuditLog(stream=io.StringIO()),
                      clock=Clock(), node="n")
    decisions = decide(world[0], world[1], policy=policy, now=0.0)
    assert [o.result for o in await evictor.act(decisions)] == [R.EVICTED]


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
        clock.now += 1
    assert s.counts == {("pending", "interference", "b"): 1}
    assert [line["result"] for line in lines(stream)] == ["pending"]
    clock.now += 60
    await s.run_cycle(*world)
    assert api.evictions == [("b/batch", False, None)]
    assert s.counts[("evicted", "interference", "b")] == 1
    await s.run_cycle([], world[1])  # the finding is resolved: forgotten
    await s.run_cycle(*world)  # and when it comes back, its (new) refusal counts again
    assert [line["result"] for line in lines(stream)][-1] != "evicted"
    assert len(lines(stream)) == 3
