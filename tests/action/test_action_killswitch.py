"""The kill switch fails closed: unknown until read, unknown again when stale, re-read right before each send."""

from __future__ import annotations

import io

import pytest

from action_builders import attribution, finding, pod, warmed_stage
from watchdog.action import ActionStage, AuditLog, Evictor, KillSwitch, Pacer
from watchdog.config.action import ActionPolicy
from watchdog.config.action import KillSwitch as KillSwitchSettings
from watchdog.model import EvictionResult as R
from watchdog.model import PodInfo, PodRef
from watchdog.testbed import SimClock


class Reader:
    """read_kill_switch as KubeEvictions answers it: True/False, None when unreadable (e.g. 403)."""

    def __init__(self, *answers: bool | None) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, str, str]] = []

    async def read_kill_switch(self, namespace: str, configmap_name: str, key: str = "paused") -> bool | None:
        self.calls.append((namespace, configmap_name, key))
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


NOW = 5_000.0


class Api:
    def __init__(self) -> None:
        self.evictions: list[str] = []
        self.events: list[str] = []

    async def evict(self, pod: PodRef, *, dry_run: bool, grace_seconds=None):
        self.evictions.append(pod.key)

        class Reply:
            result = R.DRY_RUN if dry_run else R.EVICTED
            http_status = 201
            message = ""
            retry_after = None

        return Reply()

    async def get_pod(self, namespace: str, name: str):
        return PodInfo(uid=f"uid-{namespace}-{name}", namespace=namespace, name=name)  # as action_builders made it

    async def record_event(self, pod, *, reason, message, type="Warning", action="Evict", component, host,
                           tenant=None, owner_kind=None):
        self.events.append(reason)
        return True


def switch(reader, clock=None, **settings) -> KillSwitch:
    return KillSwitch(reader, settings=KillSwitchSettings(**settings), namespace="gpu-watchdog",
                      clock=clock or SimClock(NOW))


def world(*, since: float = 0.0):
    culprit, victim = pod("batch", ns="b", priority=1), pod("web", priority=100)
    return [finding(culprit=culprit, victims=(victim,), since=since)], attribution(culprit, victim)


def stage(api, gate: KillSwitch, mode: str = "enforce", *, clock: SimClock | None = None, **policy):
    """A stage whose agent started long enough ago for its bucket (empty at process start) to have filled."""
    p = ActionPolicy.model_validate({"mode": mode, "interference": {"for_seconds": 0}, **policy})
    audit = io.StringIO()
    s, _ = warmed_stage(p, now=NOW, clock=clock, api=api, audit=AuditLog(stream=audit), node="n", kill_switch=gate)
    return s, audit


async def test_unknown_until_read_and_counted():
    gate = switch(Reader(None))
    assert gate.unknown and gate.last_success is None
    assert gate.blocking_reason().startswith("kill switch unknown")
    assert await gate.refresh() is False  # not known to be on, but still unknown: sends hold
    assert (gate.reads, gate.failures, gate.last_success, gate.unknown) == (1, 1, None, True)


async def test_a_switch_that_cannot_be_read_never_lets_a_send_through():
    api, gate = Api(), switch(Reader(None))  # e.g. 403: the Role lacks get on the ConfigMap
    s, _ = stage(api, gate)
    for _ in range(3):
        outcomes = (await s.run_cycle(*world())).outcomes
        assert [o.result for o in outcomes] == [R.PAUSED]
        assert outcomes[0].detail.startswith("kill switch unknown")
    # One GET for three cycles: after a failed read the next GET waits refresh_seconds.
    assert api.evictions == [] and api.events == [] and gate.failures == 1 and gate.reads == 1
    assert s.counts == {("paused", "interference", "b"): 1}  # a standing refusal: counted once


async def test_absent_configmap_means_not_paused():
    api, gate = Api(), switch(Reader(False))  # KubeEvictions answers False for a 404
    s, _ = stage(api, gate)
    assert [o.result for o in (await s.run_cycle(*world())).outcomes] == [R.EVICTED]
    assert gate.reads == 1 and gate.failures == 0 and gate.last_success == 5_000.0


async def test_a_send_re_reads_the_switch_and_honours_a_new_pause():
    reader = Reader(False)
    api, gate = Api(), switch(reader)
    assert await gate.refresh() is False  # the watcher's last read: not paused
    reader.answers = [True]  # an operator flips the switch between two watcher refreshes
    s, audit = stage(api, gate)
    outcomes = (await s.run_cycle(*world())).outcomes
    assert [(o.result, o.detail) for o in outcomes] == [(R.PAUSED, "kill switch is on")]
    assert api.evictions == [] and len(reader.calls) == 2


async def test_a_read_failing_right_before_a_send_stops_it():
    reader = Reader(False)
    gate = switch(reader)
    await gate.refresh()
    reader.answers = [None]
    api = Api()
    s, _ = stage(api, gate)
    outcomes = (await s.run_cycle(*world())).outcomes
    assert outcomes[0].result is R.PAUSED and "could not be read just before sending" in outcomes[0].detail
    assert api.evictions == []


async def test_stale_after_n_refresh_periods():
    clock = SimClock(NOW)
    reader = Reader(False)
    gate = switch(reader, clock, refresh_seconds=10, stale_after_refreshes=3)
    await gate.refresh()
    clock.advance(30)
    assert not gate.unknown and gate.blocking_reason() is None
    clock.advance(1)
    assert gate.unknown and "31s ago" in gate.blocking_reason()
    reader.answers = [None]
    assert await gate.confirm() is not None  # still failing: nothing goes
    reader.answers = [False]
    clock.advance(10)  # the next read waits a refresh period after the failed one
    assert await gate.confirm() is None and not gate.unknown


async def test_a_known_pause_stops_observe_mode_and_costs_no_read_per_decision():
    reader = Reader(True)
    gate = switch(reader)
    await gate.refresh()
    api = Api()
    s, _ = stage(api, gate, mode="observe")
    assert [o.result for o in (await s.run_cycle(*world())).outcomes] == [R.PAUSED]
    assert len(reader.calls) == 1 and api.evictions == []


async def test_observe_mode_sends_nothing_so_an_unknown_switch_does_not_matter():
    gate = switch(Reader(None))
    s, _ = stage(Api(), gate, mode="observe")
    assert [o.result for o in (await s.run_cycle(*world())).outcomes] == [R.OBSERVED]


async def test_disabled_switch_never_reads_and_never_blocks():
    reader = Reader(True)
    gate = switch(reader, enabled=False)
    api = Api()
    s, _ = stage(api, gate)
    assert [o.result for o in (await s.run_cycle(*world())).outcomes] == [R.EVICTED]
    assert reader.calls == [] and not gate.unknown and gate.paused() is False


async def test_stopped_decisions_read_nothing():
    reader = Reader(False)
    gate = switch(reader)
    s, _ = stage(Api(), gate, interference={"for_seconds": 600})
    assert [o.result for o in (await s.run_cycle(*world(since=NOW))).outcomes] == [R.PENDING]
    assert reader.calls == []


async def test_another_configmap_is_unknown_until_read():
    gate = switch(Reader(False))
    await gate.refresh()
    assert not gate.unknown
    gate.set_settings(KillSwitchSettings(name="other"), namespace="gpu-watchdog")
    assert gate.unknown
    gate.set_settings(KillSwitchSettings(name="other", refresh_seconds=5), namespace="gpu-watchdog")
    assert gate.unknown  # same ConfigMap: nothing new learned, nothing forgotten


async def test_the_switch_is_an_explicit_argument_never_guessed():
    """The switch is a required keyword (None: no switch configured); there is no `paused=` callable whose switch
    would have to be found by introspecting the bound method."""
    p = ActionPolicy.model_validate({"mode": "enforce", "interference": {"for_seconds": 0}})
    gate = switch(Reader(False))
    with pytest.raises(TypeError):
        ActionStage(p, Api(), clock=SimClock(NOW), audit=AuditLog(stream=io.StringIO()),  # type: ignore[call-arg]
                    node="n")
    with pytest.raises(TypeError):
        ActionStage(p, Api(), clock=SimClock(NOW), audit=AuditLog(stream=io.StringIO()), node="n",
                    paused=gate.paused)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Evictor(Api(), policy=p, pacer=Pacer(p), audit=AuditLog(stream=io.StringIO()), clock=SimClock(NOW),
                node="n")  # type: ignore[call-arg]


async def test_an_unreadable_switch_is_read_once_per_refresh_period_not_once_per_cycle():
    """PAUSED takes no token, so only the refresh period limits the reads: a failed read waits refresh_seconds
    before the next, 60 GETs in 600 one-second cycles rather than one per cycle on an API server already failing."""
    clock = SimClock()  # shared with the stage, which moves it to NOW
    reader = Reader(None)  # 403 / 5xx / timeout, for good
    gate = switch(reader, clock, refresh_seconds=10)
    api = Api()
    s, _ = stage(api, gate, clock=clock)
    results = set()
    for _ in range(600):
        results.update(o.result for o in (await s.run_cycle(*world())).outcomes)
        clock.advance(1.0)
    assert results == {R.PAUSED} and api.evictions == []
    assert len(reader.calls) == 60 and gate.failures == 60
    reader.answers = [False]  # readable again: the next read after the period lets sends through
    clock.advance(10.0)
    assert [o.result for o in (await s.run_cycle(*world())).outcomes] == [R.EVICTED]


async def test_a_failed_read_holds_confirm_for_a_refresh_period_even_with_a_fresh_good_read_behind_it():
    clock = SimClock(NOW)
    reader = Reader(False)
    gate = switch(reader, clock, refresh_seconds=10)
    await gate.refresh()
    reader.answers = [None]
    assert await gate.refresh() is False and not gate.unknown  # the watcher's read fails; the last good one holds
    assert (await gate.confirm()).startswith("kill switch unknown: the last read")  # no GET: it failed just now
    assert len(reader.calls) == 2
    reader.answers = [False]
    clock.advance(10.0)
    assert await gate.confirm() is None and len(reader.calls) == 3
    gate.set_settings(KillSwitchSettings(name="other"), namespace="gpu-watchdog")  # another ConfigMap: read at once
    reader.answers = [None]
    await gate.confirm()
    reader.answers = [False]
    gate.set_settings(KillSwitchSettings(name="third"), namespace="gpu-watchdog")
    assert await gate.confirm() is None and len(reader.calls) == 5
