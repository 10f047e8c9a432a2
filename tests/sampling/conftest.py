"""Fixtures for the sampling tests: a fresh simulated node, its clock and a sampler per test."""

from __future__ import annotations

from typing import Iterator

import pytest

from watchdog.config.sampling import SamplingSettings
from watchdog.sampling import NvmlSampler
from watchdog.testbed import DEMO_SCENARIO, SimClock, SimulatedGpuNode, load_scenario


@pytest.fixture
def clock() -> SimClock:
    return SimClock()


@pytest.fixture
def node(clock: SimClock) -> Iterator[SimulatedGpuNode]:
    simulated = SimulatedGpuNode.from_scenario(load_scenario(DEMO_SCENARIO), clock)
    yield simulated
    simulated.close()


@pytest.fixture
def sampler(node: SimulatedGpuNode, clock: SimClock) -> Iterator[NvmlSampler]:
    instance = NvmlSampler(node.nvml, node="sim-node-1", clock=clock, settings=SamplingSettings())
    instance.open()
    yield instance
    instance.close()
