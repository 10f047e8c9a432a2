"""Helpers shared by the sampling tests (imported by basename, like the other test folders' builders)."""

from __future__ import annotations

from watchdog.model import NodeSample
from watchdog.sampling import NvmlSampler
from watchdog.testbed import SimClock


def run_ticks(sampler: NvmlSampler, clock: SimClock, ticks: int, *, step: float = 1.0, first: int = 0) -> NodeSample:
    """Sample ``ticks`` times, advancing the simulated clock by ``step`` after each; returns the last sample."""
    sample = None
    for tick in range(first, first + ticks):
        sample = sampler.sample(tick)
        clock.advance(step)
    assert sample is not None
    return sample
