"""Helpers for the Kubernetes-layer tests: hand-moved clocks, an instant recording sleep, task scoping."""

from __future__ import annotations

import asyncio
import contextlib


class FakeClock:
    """Monotonic and wall clocks the test moves by hand (the wall clock starts at a fixed epoch)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = 0.0
        self.epoch = start

    def __call__(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.epoch + self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class RecordingSleep:
    """An injected sleep that returns at once, advances a FakeClock if given, and records the delays."""

    def __init__(self, clock: FakeClock | None = None) -> None:
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
