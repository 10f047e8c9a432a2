"""Helpers for the Kubernetes-layer tests: an instant recording sleep that moves the test bed's clock, task scoping.

A test's clock is a SimClock with a wall-time epoch: its ``elapsed()`` is the monotonic clock the Kubernetes
helpers take, its ``now()`` the wall clock they stamp Leases and records with."""

from __future__ import annotations

import asyncio
import contextlib

from watchdog.testbed import SimClock

EPOCH = 1_800_000_000.0  # the wall time at a test's start


class RecordingSleep:
    """An injected sleep that returns at once, advances a SimClock if given, and records the delays."""

    def __init__(self, clock: SimClock | None = None) -> None:
        self.delays: list[float] = []
        self.clock = clock
        self.changed = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        if self.clock is not None:
            self.clock.advance(seconds)
        self.changed.set()

    async def until(self, predicate, *, timeout: float = 5.0) -> None:
        async def wait() -> None:
            while not predicate():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(wait(), timeout)


@contextlib.asynccontextmanager
async def running(coroutine):
    """Run a long-lived coroutine as a task for the block, then cancel it and wait for it (no leaked tasks)."""
    task = asyncio.create_task(coroutine)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def next_item(queue: asyncio.Queue, *, timeout: float = 5.0):
    return await asyncio.wait_for(queue.get(), timeout)
