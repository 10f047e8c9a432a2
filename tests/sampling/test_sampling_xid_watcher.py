"""The Xid watcher thread: events reach a running asyncio loop, in order, with GI/CI; stop is prompt."""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

import pynvml
import pytest

from watchdog.model import XidEvent
from watchdog.sampling import NvmlSampler, XidWatcher
from watchdog.testbed import SimClock, SimulatedGpuNode

READY_SECONDS = 10.0  # bound on thread start-up (real time); never reached when things work
EVENT_SECONDS = 10.0


class Delivery:
    """What the service does: hop from the watcher thread onto the loop with call_soon_threadsafe."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[XidEvent] = asyncio.Queue()
        self.mig_changes: list[int] = []

    def on_event(self, event: XidEvent) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, event)

    async def next(self) -> XidEvent:
        return await asyncio.wait_for(self.queue.get(), EVENT_SECONDS)


@pytest.fixture
async def delivery() -> AsyncIterator[Delivery]:
    yield Delivery(asyncio.get_running_loop())


def _watcher(node: SimulatedGpuNode, clock: SimClock, delivery: Delivery, **options) -> XidWatcher:
    return XidWatcher(node.nvml, on_event=delivery.on_event, clock=clock, wait_ms=50,
                      on_mig_change=delivery.mig_changes.append, **options)


async def test_events_arrive_in_order_with_instance_ids(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock, delivery: Delivery
) -> None:
    watcher = _watcher(node, clock, delivery, node_handles=sampler.gpu_handles())
    watcher.start()
    try:
        assert await asyncio.to_thread(watcher.wait_ready, READY_SECONDS)
        node.push_xid(1, 13, instance=2)
        node.push_xid(0, 79)
        node.push_xid(1, 94, instance=0)
        events = [await delivery.next() for _ in range(3)]
    finally:
        assert await asyncio.to_thread(watcher.stop)
    assert not watcher.running

    layout = {(d.gpu_index, d.instance): d for d in node.device_uuids() if d.instance is not None}
    assert [(e.gpu_index, e.xid) for e in events] == [(1, 13), (0, 79), (1, 94)]
    assert [e.gpu_uuid for e in events] == [node.gpu_uuids[1], node.gpu_uuids[0], node.gpu_uuids[1]]
    assert (events[0].gpu_instance, events[0].compute_instance) == (
        layout[(1, 2)].gpu_instance, layout[(1, 2)].compute_instance)
    assert events[1].gpu_instance is None and events[1].compute_instance is None  # 0xFFFFFFFF
    assert all(e.event_type == pynvml.nvmlEventTypeXidCriticalError for e in events)
    assert watcher.registered == [0, 1, 2]


async def test_scheduled_xid_and_mig_change_follow_the_clock(
    node: SimulatedGpuNode, clock: SimClock, delivery: Delivery, sampler: NvmlSampler
) -> None:
    watcher = _watcher(node, clock, delivery)  # enumerates the GPUs itself
    watcher.start()
    try:
        assert await asyncio.to_thread(watcher.wait_ready, READY_SECONDS)
        node.reconfigure_mig(0, ["7g.80gb"])
        change = await delivery.next()
        clock.advance(20.0)  # the demo's Xid 13 on GPU 1 is scheduled at tick 20
        xid = await delivery.next()
    finally:
        assert await asyncio.to_thread(watcher.stop)

    assert change.event_type == pynvml.nvmlEventMigConfigChange and change.xid == 0
    assert delivery.mig_changes == [0]
    assert (xid.gpu_index, xid.xid, xid.timestamp) == (1, 13, 20.0)
    assert xid.gpu_instance is not None


async def test_gpu_lost_in_wait_is_counted_and_the_watch_goes_on(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock, delivery: Delivery
) -> None:
    watcher = _watcher(node, clock, delivery, node_handles=sampler.gpu_handles(), error_backoff_seconds=0.01)
    watcher.start()
    try:
        assert await asyncio.to_thread(watcher.wait_ready, READY_SECONDS)
        node.lose_gpu(2)
        node.push_xid(0, 48)
        event = await delivery.next()
    finally:
        assert await asyncio.to_thread(watcher.stop)

    assert (event.gpu_index, event.xid) == (0, 48)
    assert watcher.error_counts() == {"gpu_is_lost": 1}


async def test_unsupported_gpu_is_skipped_and_a_failing_consumer_is_survived(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock, delivery: Delivery
) -> None:
    node.inject_error("nvmlDeviceGetSupportedEventTypes", pynvml.NVML_ERROR_NOT_SUPPORTED, device_index=0)
    failures = iter([RuntimeError("consumer bug")])

    def flaky(event: XidEvent) -> None:
        for failure in failures:
            raise failure
        delivery.on_event(event)

    watcher = XidWatcher(node.nvml, on_event=flaky, clock=clock, wait_ms=50, node_handles=sampler.gpu_handles())
    watcher.start()
    try:
        assert await asyncio.to_thread(watcher.wait_ready, READY_SECONDS)
        node.push_xid(1, 31)
        node.push_xid(2, 43)
        event = await delivery.next()
    finally:
        assert await asyncio.to_thread(watcher.stop)

    assert watcher.registered == [1, 2]
    assert (event.gpu_index, event.xid) == (2, 43)  # the first went to the failing consumer
    assert watcher.error_counts() == {"not_supported": 1, "callback": 1}


def test_stop_joins_the_thread_and_frees_the_event_set(node: SimulatedGpuNode, clock: SimClock) -> None:
    node.nvml.nvmlInit()
    watcher = XidWatcher(node.nvml, on_event=lambda event: None, clock=clock, wait_ms=20)
    watcher.start()
    assert watcher.wait_ready(READY_SECONDS)
    assert watcher.running

    assert watcher.stop()
    assert not watcher.running
    assert node.nvml.calls["nvmlEventSetFree"] == 1
    assert watcher.stop()  # idempotent
    node.nvml.nvmlShutdown()


def test_wait_ms_must_be_positive(node: SimulatedGpuNode, clock: SimClock) -> None:
    with pytest.raises(ValueError, match="wait_ms"):
        XidWatcher(node.nvml, on_event=lambda event: None, clock=clock, wait_ms=0)
