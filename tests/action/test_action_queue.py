"""The evictor beside the tick: a cycle settles at once and queues its sends, a queued pod is not sent for twice,
a full queue refuses with a counted result, and a send that waited past max_decision_age_seconds is dropped."""

from __future__ import annotations

import asyncio
import io

from tests.action.action_builders import attribution, finding, pod, warmed_stage
from tests.action.test_action_evictor import RecordingApi
from tests.waiting import poll
from watchdog.action import stage as stage_module
from watchdog.action.audit import AuditLog
from watchdog.config.action import ActionPolicy
from watchdog.model import EvictionResult as R

NOW = 1_000.0


class SlowApi(RecordingApi):
    """Every eviction waits until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def evict(self, pod, *, dry_run, grace_seconds=None):
        await self.gate.wait()
        return await super().evict(pod, dry_run=dry_run, grace_seconds=grace_seconds)


def setup(api, **policy):
    p = ActionPolicy.model_validate({"mode": "enforce", "interference": {"for_seconds": 0},
                                     "node_eviction_burst": 5, "tenant_cooldown_seconds": 0, **policy})
    return warmed_stage(p, now=NOW, api=api, audit=AuditLog(stream=io.StringIO()), node="node-1", kill_switch=None)


def world(*names: str):
    victim = pod("web", priority=100)
    culprits = [pod(name, ns=f"ns-{name}", priority=1) for name in names]
    findings = [finding(culprit=c, victims=(victim,), key=f"interference/{c.name}") for c in culprits]
    return findings, attribution(victim, *culprits)


async def test_the_cycle_returns_before_the_send_and_a_queued_pod_is_not_sent_for_twice():
    api = SlowApi()
    stage, clock = setup(api)
    sender = asyncio.create_task(stage.sender())
    try:
        await poll(lambda: stage._queue is not None, what="the sender's queue")
        findings, attr = world("hog")
        report = await stage.run_cycle(findings, attr, tick=1)  # returns although the API has not answered
        assert report.outcomes == () and len(stage.in_flight) == 1
        clock.advance(1.0)
        again = await stage.run_cycle(findings, attr, tick=2)  # the same finding next tick: already queued
        assert again.counted == () and len(stage.in_flight) == 1
        api.gate.set()
        await poll(lambda: not stage.in_flight, what="the send")
        assert [key for key, *_ in api.evictions] == ["ns-hog/hog"]
        later = await stage.run_cycle((), attr, tick=3)  # the finished send is reported with the next cycle
        assert [o.result for o in later.outcomes] == [R.EVICTED]
    finally:
        sender.cancel()


async def test_a_full_queue_refuses_and_counts(monkeypatch):
    monkeypatch.setattr(stage_module, "QUEUE_LIMIT", 1)
    api = SlowApi()
    stage, _clock = setup(api)
    sender = asyncio.create_task(stage.sender())
    try:
        await poll(lambda: stage._queue is not None, what="the sender's queue")
        findings, attr = world("a", "b")
        report = await stage.run_cycle(findings, attr, tick=1)
        assert [(r.result, r.pod) for r in report.counted] == [(R.RATE_LIMITED, "b")]
        assert stage.queue_full == 1 and [q.decision.pod for q in stage.in_flight] == ["a"]
        assert stage.counts[("rate_limited", "interference", "ns-b")] == 1
    finally:
        api.gate.set()
        sender.cancel()


async def test_a_send_that_waited_past_the_decision_age_is_dropped_as_stale():
    api = RecordingApi()
    stage, clock = setup(api, max_decision_age_seconds=5)
    findings, attr = world("hog")
    paced, decided_at = stage.plan(findings, attr, tick=1)
    report, to_send = stage.evictor.settle(paced)
    clock.advance(6.0)  # the send is taken from the queue 6 s after its tick
    outcome = await stage.evictor.send(to_send[0], decided_at=decided_at)
    assert outcome.result is R.STALE and "over max_decision_age_seconds" in outcome.detail
    assert api.evictions == [] and stage.counts[("stale", "interference", "ns-hog")] == 1
