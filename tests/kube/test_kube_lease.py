"""LeaseElector against the fake API server, time driven by hand (injected clock and sleep)."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest
from kube_helpers import FakeClock, RecordingSleep, running

from watchdog.kube.lease import LeaseElector


def elector(api, clock, identity, **kwargs):
    return LeaseElector(api, namespace="gpu-watchdog", name="controller", identity=identity, lease_duration=15,
                        renew_deadline=10, retry_period=2, clock=clock, wall_clock=clock.wall, **kwargs)


def lease(server):
    [stored] = server.objects("leases", "gpu-watchdog")
    return stored["spec"]


async def test_one_leads_and_the_other_takes_over_only_after_the_lease_expires(server, api):
    clock = FakeClock()
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
    clock = FakeClock()
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
    clock = FakeClock()
    sleep = RecordingSleep(clock)
    b_leads = asyncio.Event()
    a = elector(api, clock, "a", sleep=sleep)
    b = elector(api, clock, "b", sleep=sleep, on_started_leading=b_leads.set)
    async with running(a.run()) as a_task:
        await sleep.until(lambda: a.is_leader)
        async with running(b.run()):
            await sleep.until(lambda: len(sleep.delays) >= 20)  # both looping; a keeps renewing
            assert a.is_leader and not b.is_leader
            a_task.cancel()  # a crashes: no release, its lease just stops being renewed
            await asyncio.gather(a_task, return_exceptions=True)
            final = lease(server)  # a's last write, whether or not a saw its answer before dying
            assert final["holderIdentity"] == "a"
            last_renewal = datetime.fromisoformat(final["renewTime"].replace("Z", "+00:00")).timestamp() - clock.epoch
            await asyncio.wait_for(b_leads.wait(), 5)
            assert b.is_leader and not a.is_leader
            waited = clock() - last_renewal
            # Never before expiry. At most: b may see a's last write two retry periods late (both electors' sleeps
            # move the shared clock), waits out the lease on its own clock, and tries every retry period.
            assert 15 <= waited <= 15 + 4 * 2
    assert lease(server)["holderIdentity"] == "b" and lease(server)["leaseTransitions"] == 1


async def test_a_stale_write_gets_409_and_loses(server, api):
    clock = FakeClock()
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
    clock = FakeClock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    assert await a.try_acquire_or_renew()
    assert await b.try_acquire_or_renew() is False
    assert await a.release() is True
    assert lease(server)["holderIdentity"] == ""
    assert await b.try_acquire_or_renew() is True  # no waiting for expiry
    assert lease(server)["leaseTransitions"] == 1
    assert await a.try_acquire_or_renew() is False  # released electors stay out


async def test_unreachable_api_means_not_leader(server, api):
    clock = FakeClock()
    a = elector(api, clock, "a")
    server.fail_next(1, status=500)
    assert await a.try_acquire_or_renew() is False
    assert a.counters["errors"] == 1 and a.is_leader is False


def test_durations_are_validated(api):
    clock = FakeClock()
    with pytest.raises(ValueError, match="lease_duration"):
        LeaseElector(api, namespace="n", name="l", identity="a", lease_duration=5, renew_deadline=5, clock=clock)
    with pytest.raises(ValueError, match="retry_period"):
        LeaseElector(api, namespace="n", name="l", identity="a", renew_deadline=2, retry_period=2, clock=clock)
    with pytest.raises(ValueError, match="identity"):
        LeaseElector(api, namespace="n", name="l", identity="", clock=clock)
