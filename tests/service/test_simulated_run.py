"""`run --simulate` / `record --simulate`: the production run loop on a world, one simulated tick per cycle."""

from __future__ import annotations

from tests.service.conftest import SCENARIOS
from watchdog.demo.runner import run_simulated


async def test_bounded_simulated_run_moves_one_tick_per_cycle():
    seen: list[tuple[int, float, bool]] = []

    def on_tick(sample, attribution, findings, external_signals) -> None:
        seen.append((sample.tick, sample.timestamp, attribution.healthy))

    await run_simulated(SCENARIOS / "demo.yaml", port=0, ticks=30, speed=1e6, on_tick=on_tick,
                        flags={"sampling": {"events": False}})
    assert [tick for tick, _, _ in seen] == list(range(30))
    assert [timestamp for _, timestamp, _ in seen] == [float(tick) for tick in range(30)]  # background tasks
    assert any(healthy for _, _, healthy in seen[5:])  # never move the simulated clock
