"""Refresh policy of the cached kubelet assignments, driven by a manual clock against a real fake kubelet."""

from __future__ import annotations

import logging

import pytest

from watchdog.attribution.assignments import KubeletAssignments

LOGGER = "watchdog.attribution.assignments"


@pytest.fixture
def assignments(client):
    return KubeletAssignments(client, refresh_seconds=10.0, unknown_refresh_seconds=2.0,
                              backoff_initial_seconds=1.0, backoff_max_seconds=60.0)


def one_pod(kubelet, *devices):
    kubelet.set_pods([("ml", "train", [("main", "nvidia.com/gpu", list(devices))])])


async def test_refresh_on_the_timer_only_and_reads_cost_nothing(kubelet, assignments, clock):
    one_pod(kubelet, "GPU-1")
    assert not assignments.ok  # nothing listed yet: absences prove nothing
    assert await assignments.refresh(clock())
    assert assignments.ok and [a.device_id for a in assignments.assignments] == ["GPU-1"]
    for _ in range(200):  # what 200 scrapes read
        assert assignments.assignments and assignments.knows("GPU-1")
    assert not await assignments.refresh(clock.advance(9.9))
    assert kubelet.calls == 1 and assignments.list_calls == 1
    one_pod(kubelet, "GPU-1", "GPU-2")
    assert await assignments.refresh(clock.advance(0.1))
    assert assignments.knows("GPU-2")
    assert kubelet.calls == 2


async def test_unknown_device_gets_one_extra_refresh_then_is_negative_cached(kubelet, assignments, clock):
    one_pod(kubelet, "GPU-1")
    await assignments.refresh(clock())
    assert assignments.note_unknown("GPU-host", clock())
    assert await assignments.refresh(clock.advance(0.5))  # extra List, well before the 10 s timer
    assert assignments.is_negative("GPU-host")
    assert assignments.extra_refreshes == 1
    for _ in range(50):  # NVML keeps reporting the host process every tick
        assert not assignments.note_unknown("GPU-host", clock.advance(0.1))
        assert not await assignments.refresh(clock())
    assert kubelet.calls == 2
    assert assignments.counters["negative_cached"] == 1


async def test_extra_refresh_finds_a_new_pod_and_it_leaves_the_negative_cache(kubelet, assignments, clock):
    one_pod(kubelet, "GPU-1")
    await assignments.refresh(clock())
    assignments.note_unknown("GPU-2", clock())
    await assignments.refresh(clock())
    assert assignments.is_negative("GPU-2")
    one_pod(kubelet, "GPU-1", "GPU-2")  # a pod is given the device later; the timer picks it up
    assert await assignments.refresh(clock.advance(10.0))
    assert assignments.knows("GPU-2") and not assignments.is_negative("GPU-2")


async def test_extra_refreshes_are_rate_limited(kubelet, assignments, clock):
    one_pod(kubelet, "GPU-1")
    await assignments.refresh(clock())
    assignments.note_unknown("GPU-a", clock())
    assert await assignments.refresh(clock())
    one_pod(kubelet, "GPU-1", "GPU-b")
    assert assignments.note_unknown("GPU-b", clock.advance(0.5))
    assert not await assignments.refresh(clock.advance(1.0))  # 1.5 s after the last extra List: too soon
    assert assignments.next_due() == pytest.approx(clock() + 0.5)
    assert await assignments.refresh(clock.advance(0.5))
    assert assignments.knows("GPU-b") and assignments.extra_refreshes == 2
    assert kubelet.calls == 3


async def test_absent_socket_degrades_without_raising_and_logs_once(assignments, clock, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    for _ in range(5):
        assert await assignments.refresh(clock())
        clock.advance(assignments.next_due() - clock())
    assert not assignments.ok and assignments.assignments == ()
    assert assignments.errors == {"unavailable": 5}
    assert "does not exist" in assignments.last_error
    warnings = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "degraded" in warnings[0].getMessage()


async def test_kubelet_restart_recovers_after_backoff(kubelet, assignments, clock, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    one_pod(kubelet, "GPU-1")
    await assignments.refresh(clock())
    await kubelet.stop()
    assert await assignments.refresh(clock.advance(10.0))
    assert not assignments.ok and assignments.assignments == ()  # degraded: no stale labels
    delays = []
    for _ in range(3):
        delays.append(assignments.next_due() - clock())
        assert not await assignments.refresh(clock.advance(delays[-1] - 0.01))  # still backing off
        assert await assignments.refresh(clock.advance(0.01))
    assert delays == pytest.approx([1.0, 2.0, 4.0])
    await kubelet.start()
    assert not await assignments.refresh(clock.advance(7.9))
    assert await assignments.refresh(clock.advance(0.1))  # 8 s after the 4th failure
    assert assignments.ok and assignments.knows("GPU-1")
    assert assignments.next_due() == pytest.approx(clock() + 10.0)
    assert any("recovered after 4" in record.getMessage() for record in caplog.records)


async def test_backoff_is_capped(assignments, clock):
    await assignments.refresh(clock())
    for _ in range(9):
        await assignments.refresh(clock.advance(assignments.next_due() - clock()))
    assert assignments.next_due() - clock() == pytest.approx(60.0)


async def test_rate_limited_kubelet_degrades_then_recovers(kubelet, assignments, clock):
    one_pod(kubelet, "GPU-1")
    kubelet.rate_limit = True
    await assignments.refresh(clock())
    assert not assignments.ok and assignments.errors == {"rate_limited": 1}
    assert assignments.counters["errors_rate_limited"] == 1
    kubelet.rate_limit = False
    assert await assignments.refresh(clock.advance(1.0))
    assert assignments.ok and assignments.knows("GPU-1")


async def test_unexpected_client_failure_is_contained(clock):
    class Broken:
        async def list_assignments(self):
            raise RuntimeError("boom")

    assignments = KubeletAssignments(Broken())
    assert await assignments.refresh(clock())
    assert assignments.errors == {"error": 1} and not assignments.ok


async def test_refresher_agent_sleeps_until_due_on_the_injected_clock(kubelet, assignments, clock):
    one_pod(kubelet, "GPU-1")
    naps = []

    class Stop(Exception):
        pass

    async def sleep(seconds):
        naps.append(seconds)
        clock.advance(seconds)
        if len(naps) > 80:
            raise Stop

    with pytest.raises(Stop):
        await assignments.refresher(clock, sleep=sleep, poll_seconds=0.25)
    assert all(0 <= nap <= 0.25 for nap in naps)
    assert kubelet.calls == 3  # 80 polls × 0.25 s = 20 s: at 0, 10 and 20 s


def test_settings_are_checked():
    with pytest.raises(ValueError):
        KubeletAssignments(object(), refresh_seconds=0)
    with pytest.raises(ValueError):
        KubeletAssignments(object(), backoff_initial_seconds=5, backoff_max_seconds=1)


async def test_request_refresh_makes_a_list_due_now_but_keeps_a_failing_kubelets_backoff():
    from watchdog.attribution.assignments import KubeletAssignments

    class Lister:
        def __init__(self) -> None:
            self.calls, self.fail = 0, False

        async def list_assignments(self):
            self.calls += 1
            if self.fail:
                raise RuntimeError("down")
            return ()

    lister = Lister()
    cache = KubeletAssignments(lister, refresh_seconds=10.0)
    assert await cache.refresh(0.0) and not await cache.refresh(1.0)
    cache.request_refresh()
    assert await cache.refresh(1.0) and lister.calls == 2
    lister.fail = True
    cache.request_refresh()
    assert await cache.refresh(2.0) and not cache.ok
    cache.request_refresh()
    assert not await cache.refresh(2.5)  # still inside the backoff
