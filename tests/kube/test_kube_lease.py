"""LeaseElector against the fake API server, time driven by hand (injected clock and sleep)."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest
from kube_helpers import EPOCH, RecordingSleep, running

from watchdog.kube.lease import LeaseElector
from watchdog.testbed import SimClock


def elector(api, clock, identity, **kwargs):
    return LeaseElector(api, namespace="gpu-watchdog", name="controller", identity=identity, lease_duration=15,
                        renew_deadline=10, retry_period=2, clock=clock.elapsed, wall_clock=clock.now, **kwargs)


def lease(server):
    [stored] = server.objects("leases", "gpu-watchdog")
    return stored["spec"]


async def test_one_leads_and_the_other_takes_over_only_after_the_lease_expires(server, api):
    clock = SimClock(epoch=EPOCH)
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    assert await a.try_acquire_or_renew() is True
    assert await b.try_acquire_or_renew() is False
    assert lease(server)["holderIdentity"] == "a" and lease(server)["leaseTransitions"] == 0
    clock.advance(14)  # a silent, but b first saw this record 14 s ago: not yet expired
    assert await b.try_acquire_or_renew() is False
    clock.advance(2)
    assert await b.try_acquire_or_renew() is True
    spec = lease(server)
    assert (spec["holderIdentity"], spec["leaseTransitions"], spec["leaseDurationSeconds"]) == ("b", 1, 15)
    assert spec["acquireTime"] == spec["renewTime"] and spec["renewTime"].endswith(".000000Z")
    assert await a.try_acquire_or_renew() is False  # a now observes b's fresh record


async def test_renewals_keep_the_lease_and_its_acquire_time(server, api):
    clock = SimClock(epoch=EPOCH)
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    assert await a.try_acquire_or_renew()
    acquired = lease(server)["acquireTime"]
    for _ in range(20):  # 40 s of renewals every 2 s: b never sees an unchanged record for 15 s
        clock.advance(2)
        assert await a.try_acquire_or_renew()
        assert await b.try_acquire_or_renew() is False
    spec = lease(server)
    assert (spec["acquireTime"], spec["leaseTransitions"], spec["holderIdentity"]) == (acquired, 0, "a")
    assert spec["renewTime"] != acquired


async def test_running_electors_fail_over_when_the_leader_stops(server, api):
    clock = SimClock(epoch=EPOCH)
    sleep = RecordingSleep(clock)
    b_leads = asyncio.Event()
    took_over: list[float] = []

    def b_started() -> None:
        took_over.append(clock.elapsed())  # b keeps renewing (moving the clock) before this test wakes: read it now
        b_leads.set()

    a = elector(api, clock, "a", sleep=sleep)
    b = elector(api, clock, "b", sleep=sleep, on_started_leading=b_started)
    async with running(a.run()) as a_task:
        await sleep.until(lambda: a.is_leader)
        async with running(b.run()):
            await sleep.until(lambda: len(sleep.delays) >= 20)  # both looping; a keeps renewing
            assert a.is_leader and not b.is_leader
            a_task.cancel()  # a crashes: no release, its lease just stops being renewed
            await asyncio.gather(a_task, return_exceptions=True)
            died = clock.elapsed()  # a writes nothing after this
            final = lease(server)  # a's last write, whether or not a saw its answer before dying
            assert final["holderIdentity"] == "a"
            last_renewal = datetime.fromisoformat(final["renewTime"].replace("Z", "+00:00")).timestamp() - clock.epoch
            await asyncio.wait_for(b_leads.wait(), 5)
            assert b.is_leader and not a.is_leader
            # Never before the lease expired, counted from a's last write (b dates a record by when it read it).
            assert took_over[0] - last_renewal >= 15
            # At most: b reads a's last write by its next try after a died (while both ran, both electors' sleeps
            # moved the shared clock, so measure from a's death), waits out the lease, tries every retry period.
            assert took_over[0] <= died + 2 + 15 + 2
    assert lease(server)["holderIdentity"] == "b" and lease(server)["leaseTransitions"] == 1


async def test_a_stale_write_gets_409_and_loses(server, api):
    clock = SimClock(epoch=EPOCH)
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    assert await a.try_acquire_or_renew()
    assert await b.try_acquire_or_renew() is False
    clock.advance(16)
    original = api.request_json

    async def renew_between_read_and_write(method, path, **kwargs):
        if method == "PUT" and kwargs["body"]["spec"]["holderIdentity"] == "b":
            assert await a.try_acquire_or_renew()  # a renews after b read the lease
        return await original(method, path, **kwargs)

    api.request_json = renew_between_read_and_write
    assert await b.try_acquire_or_renew() is False
    assert b.counters["conflicts"] == 1
    assert lease(server)["holderIdentity"] == "a"


async def test_release_hands_over_at_once(server, api):
    clock = SimClock(epoch=EPOCH)
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    assert await a.try_acquire_or_renew()
    assert await b.try_acquire_or_renew() is False
    assert await a.release() is True
    assert lease(server)["holderIdentity"] == ""
    assert await b.try_acquire_or_renew() is True  # no waiting for expiry
    assert lease(server)["leaseTransitions"] == 1
    assert await a.try_acquire_or_renew() is False  # released electors stay out


async def test_unreachable_api_means_not_leader(server, api):
    clock = SimClock(epoch=EPOCH)
    a = elector(api, clock, "a")
    server.fail_next(1, status=500)
    assert await a.try_acquire_or_renew() is False
    assert a.counters["errors"] == 1 and a.is_leader is False


def test_durations_are_validated(api):
    clock = SimClock(epoch=EPOCH)
    with pytest.raises(ValueError, match="lease_duration"):
        LeaseElector(api, namespace="n", name="l", identity="a", lease_duration=5, renew_deadline=5, clock=clock.elapsed)
    with pytest.raises(ValueError, match="retry_period"):
        LeaseElector(api, namespace="n", name="l", identity="a", renew_deadline=2, retry_period=2, clock=clock.elapsed)
    with pytest.raises(ValueError, match="identity"):
        LeaseElector(api, namespace="n", name="l", identity="", clock=clock.elapsed)


async def test_expiry_follows_the_records_lease_duration_not_the_candidates(server, api):
    clock = SimClock(epoch=EPOCH)
    slow = LeaseElector(api, namespace="gpu-watchdog", name="controller", identity="a", lease_duration=30,
                        renew_deadline=20, retry_period=2, clock=clock.elapsed, wall_clock=clock.now)
    b = elector(api, clock, "b")  # b's own setting is 15 s
    assert await slow.try_acquire_or_renew()
    assert lease(server)["leaseDurationSeconds"] == 30
    assert await b.try_acquire_or_renew() is False
    clock.advance(16)  # past b's 15 s, within the 30 s a promised: a may still be acting
    assert await b.try_acquire_or_renew() is False
    clock.advance(14)  # 30 s since b saw the record change
    assert await b.try_acquire_or_renew() is True
    assert lease(server)["holderIdentity"] == "b" and lease(server)["leaseDurationSeconds"] == 15


async def test_takeover_comes_at_most_one_retry_period_after_the_lease_expires(server, api):
    clock = SimClock(epoch=EPOCH)
    a = elector(api, clock, "a")
    renewals: list[float] = []
    b_leads = asyncio.Event()
    took_over: list[float] = []

    def b_started() -> None:
        took_over.append(clock.elapsed())  # b's loop moves the clock on before the test wakes: read it here
        b_leads.set()

    async def sleep_then_let_a_renew(seconds: float) -> None:
        clock.advance(seconds)
        if clock.elapsed() <= 9:  # a renews right after each of b's sleeps for 9 s, then dies without releasing
            assert await a.try_acquire_or_renew()
            renewals.append(clock.elapsed())

    b = elector(api, clock, "b", sleep=sleep_then_let_a_renew, on_started_leading=b_started)
    assert await a.try_acquire_or_renew()
    renewals.append(clock.elapsed())
    async with running(b.run()):
        await asyncio.wait_for(b_leads.wait(), 5)
        waited = took_over[0] - renewals[-1]
        assert lease(server)["holderIdentity"] == "b" and renewals[-1] == 8
        # Never before the 15 s lease expired, and no later than one retry period (2 s) after it did.
        assert 15 <= waited <= 15 + 2


async def test_a_record_is_dated_by_when_its_answer_arrived(server, api):
    clock = SimClock(epoch=EPOCH)
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    assert await a.try_acquire_or_renew()
    original = api.request_json

    async def slow_answers(method, path, **kwargs):
        answer = await original(method, path, **kwargs)
        clock.advance(3)  # the API server took 3 s to answer; a may have renewed meanwhile
        return answer

    api.request_json = slow_answers
    assert await b.try_acquire_or_renew() is False  # read at 0, arrived at 3: valid until 18, not 15
    api.request_json = original
    clock.advance(14)  # 17
    assert await b.try_acquire_or_renew() is False
    clock.advance(1)  # 18
    assert await b.try_acquire_or_renew() is True
