"""A stop request (SIGTERM, Ctrl-C: the agent's main task cancelled) that lands as a tick's NVML sample completes is
not lost. On Python 3.11 ``asyncio.wait_for`` returns the result instead of raising in that moment (CPython
gh-86296), which left `run --simulate` running after SIGTERM now and then."""

from __future__ import annotations

import asyncio

import pytest

from watchdog.model import NodeSample
from watchdog.service.cycle import Cycle


class _Counts:
    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []

    def count_error(self, stage: str, kind: str) -> None:
        self.errors.append((stage, kind))

    def stage_done(self, *args, **kwargs) -> None:
        pass


def _cycle(future: asyncio.Future, timeout: float = 10.0) -> Cycle:
    cycle = object.__new__(Cycle)  # only what _sample reads
    cycle._sampling = None
    cycle.sampler = type("Sampler", (), {"sample": staticmethod(lambda tick: None)})()
    cycle.to_thread = lambda function, *args: future
    cycle.sample_timeout = timeout
    cycle.state = _Counts()
    return cycle


async def test_a_cancellation_landing_as_the_sample_completes_is_raised():
    future = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(_cycle(future)._sample(0))
    await asyncio.sleep(0)  # the cycle now waits for the sample
    future.set_result(NodeSample(node="n", tick=0, timestamp=0.0, gpus=()))
    task.cancel()  # in the same loop iteration: the moment wait_for used to swallow
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_sample_past_its_timeout_is_counted_and_left_running():
    future = asyncio.get_running_loop().create_future()
    cycle = _cycle(future, timeout=0.01)
    assert await cycle._sample(0) is None
    assert cycle.state.errors == [("sampling", "timeout")] and not future.cancelled()
