"""A wall-clock step (NTP, a VM resumed) is seen, counted and logged, and moves nothing that runs on the monotonic
clock: the agent's two clocks are injected apart, so the test steps one and not the other."""

from __future__ import annotations

import logging

from tests.service.conftest import SCENARIOS
from watchdog.service.agent import Agent
from watchdog.service.clock_watch import ClockStepWatch
from watchdog.testbed.world import SimulatedWorld


def test_the_watch_reports_a_step_either_way_and_nothing_within_the_tolerance():
    wall, steady = [1000.0], [5.0]
    watch = ClockStepWatch(wall=lambda: wall[0], monotonic=lambda: steady[0], tolerance=2.0)
    assert watch.check() is None  # nothing to compare with yet
    wall[0] += 1.5
    steady[0] += 1.0
    assert watch.check() is None  # 0.5 s of drift is no step
    wall[0] += 3601.0
    steady[0] += 1.0
    assert watch.check() == 3600.0
    wall[0] -= 86399.0
    steady[0] += 1.0
    assert watch.check() == -86400.0


async def test_the_agent_counts_and_logs_a_wall_clock_step_and_keeps_pacing_on_its_monotonic_clock(tmp_path, caplog):
    world = SimulatedWorld(SCENARIOS / "demo.yaml", workdir=tmp_path / "world")
    await world.start()
    offset = [0.0]
    try:
        settings = world.settings(sampling={"events": False})
        agent = Agent(settings, nvml=world.nvml, clock=lambda: world.clock() + offset[0], monotonic=world.clock)
        await agent.start()
        try:
            paced_at = []
            for tick in range(6):
                if tick == 3:
                    offset[0] = 3600.0
                with caplog.at_level(logging.WARNING, logger="watchdog.service.agent"):
                    snapshot = (await agent.cycle_once()).snapshot
                paced_at.append(agent.action.pacer._tick_times[-1][1] if agent.action.pacer._tick_times else None)
                world.advance(settings.sampling.interval_seconds)
        finally:
            await agent.stop()
    finally:
        await world.stop()
    assert snapshot.errors[("clock", "step_forward")] == 1
    assert any("wall clock stepped +3600.0s" in record.getMessage() for record in caplog.records)
    assert snapshot.sample.timestamp == world.clock() - settings.sampling.interval_seconds + 3600.0  # stamps move
    paced = [t for t in paced_at if t is not None]
    assert len(paced) == 6
    assert all(b - a == settings.sampling.interval_seconds for a, b in zip(paced, paced[1:]))  # pacing does not
