"""Xid watcher health and recovery, driven step by step with poll_once (no thread, no timing)."""

from __future__ import annotations

import asyncio
from typing import Iterator

import pynvml
import pytest

from watchdog.model import XidEvent
from watchdog.sampling import NvmlSampler, XidWatcher
from watchdog.testbed import SimClock, SimulatedGpuNode

READY_SECONDS = 10.0  # bound on thread start-up (real time); never reached when things work
WAIT = "nvmlEventSetWait_v2"


@pytest.fixture
def received() -> list[XidEvent]:
    return []


@pytest.fixture
def watcher(sampler: NvmlSampler, clock: SimClock, node: SimulatedGpuNode, received: list) -> Iterator[XidWatcher]:
    instance = XidWatcher(node.nvml, on_event=received.append, clock=clock, wait_ms=1,
                          node_handles=sampler.gpu_handles(), error_backoff_seconds=0.5, recreate_after_errors=3)
    yield instance
    instance.stop()  # frees the set before the sampler's nvmlShutdown


def test_a_set_that_keeps_failing_is_created_again(watcher: XidWatcher, node: SimulatedGpuNode, received: list) -> None:
    assert watcher.poll_once() == 0.0  # creates and registers
    assert watcher.registered == [0, 1, 2] and not watcher.watching  # no wait has ended yet
    assert watcher.poll_once() == 0.0 and watcher.watching  # a Timeout: all is well
    node.inject_error(WAIT, pynvml.NVML_ERROR_INVALID_ARGUMENT, times=3)  # e.g. NVML invalidated the set

    pauses = [watcher.poll_once() for _ in range(3)]
    assert pauses == [0.5, 1.0, 2.0]  # backing off
    assert not watcher.watching
    assert node.nvml.calls["nvmlEventSetFree"] == 1  # given up on after the third failure in a row

    assert watcher.poll_once() == 0.0  # a new set
    node.push_xid(1, 31)
    assert watcher.poll_once() == 0.0
    assert node.nvml.calls["nvmlEventSetCreate"] == 2
    assert [(event.gpu_index, event.xid) for event in received] == [(1, 31)]
    assert watcher.watching
    assert watcher.error_counts() == {"invalid_argument": 3, "event_set_recreated": 1}


def test_errors_that_are_not_in_a_row_do_not_recreate(watcher: XidWatcher, node: SimulatedGpuNode) -> None:
    watcher.poll_once()
    for _ in range(3):
        node.inject_error(WAIT, pynvml.NVML_ERROR_UNKNOWN, times=2)
        watcher.poll_once()
        watcher.poll_once()
        assert watcher.poll_once() == 0.0  # a Timeout resets the run of errors and the backoff

    assert node.nvml.calls["nvmlEventSetCreate"] == 1 and node.nvml.calls["nvmlEventSetFree"] == 0
    assert watcher.error_counts() == {"unknown": 6}


def test_lost_gpu_is_left_out_when_the_set_is_created_again(watcher: XidWatcher, node: SimulatedGpuNode) -> None:
    watcher.poll_once()
    node.lose_gpu(2)
    node.inject_error(WAIT, pynvml.NVML_ERROR_GPU_IS_LOST, times=2)

    for _ in range(3):  # two injected, then the simulation's own report of the lost GPU
        watcher.poll_once()
    watcher.poll_once()  # the new set
    watcher.poll_once()

    assert watcher.registered == [0, 1]
    assert watcher.watching
    # 3 waits, then GPU 2's refused registration (nvmlDeviceGetSupportedEventTypes says GpuIsLost).
    assert watcher.error_counts() == {"gpu_is_lost": 4, "event_set_recreated": 1}


def test_set_creation_failure_backs_off_and_retries(watcher: XidWatcher, node: SimulatedGpuNode) -> None:
    node.inject_error("nvmlEventSetCreate", pynvml.NVML_ERROR_UNKNOWN, times=1)

    assert watcher.poll_once() == 0.5
    assert watcher.poll_once() == 0.0
    assert watcher.registered == [0, 1, 2]


def test_recreate_after_errors_must_be_positive(node: SimulatedGpuNode, clock: SimClock) -> None:
    with pytest.raises(ValueError, match="recreate_after_errors"):
        XidWatcher(node.nvml, on_event=lambda event: None, clock=clock, recreate_after_errors=0)


async def test_a_running_watcher_with_no_gpu_registered_is_not_healthy(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock
) -> None:
    node.inject_error("nvmlDeviceGetSupportedEventTypes", pynvml.NVML_ERROR_NOT_SUPPORTED, times=None)
    watcher = XidWatcher(node.nvml, on_event=lambda event: None, clock=clock, wait_ms=20,
                         node_handles=sampler.gpu_handles())
    watcher.start()
    try:
        assert await asyncio.to_thread(watcher.wait_ready, READY_SECONDS)
        assert watcher.running
        assert watcher.registered == []
        assert not watcher.healthy
    finally:
        assert await asyncio.to_thread(watcher.stop)


async def test_a_running_watcher_that_delivers_is_healthy_and_a_stopped_one_is_not(
    sampler: NvmlSampler, node: SimulatedGpuNode, clock: SimClock
) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[XidEvent] = asyncio.Queue()
    watcher = XidWatcher(node.nvml, on_event=lambda event: loop.call_soon_threadsafe(queue.put_nowait, event),
                         clock=clock, wait_ms=20, node_handles=sampler.gpu_handles())
    assert not watcher.healthy
    watcher.start()
    try:
        assert await asyncio.to_thread(watcher.wait_ready, READY_SECONDS)
        node.push_xid(0, 79)
        event = await asyncio.wait_for(queue.get(), READY_SECONDS)
        healthy_while_running = watcher.healthy  # the wait that delivered ended well, and so do Timeouts
    finally:
        assert await asyncio.to_thread(watcher.stop)

    assert event.xid == 79 and healthy_while_running
    assert not watcher.healthy
