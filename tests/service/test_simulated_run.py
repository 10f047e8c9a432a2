"""`run --simulate` / `record --simulate`: the production run loop on a world, one simulated tick per cycle."""

from __future__ import annotations

from tests.service.conftest import SCENARIOS
from watchdog.testbed.runner import run_simulated


async def test_bounded_simulated_run_moves_one_tick_per_cycle():
    seen: list[tuple[int, float, bool]] = []

    class Seen:
        stage = "test"

        def tick_done(self, result) -> None:
            seen.append((result.sample.tick, result.sample.timestamp, result.attribution.healthy))

    await run_simulated(SCENARIOS / "demo.yaml", port=0, ticks=30, speed=1e6, sinks=(Seen(),),
                        flags={"sampling": {"events": False}})
    assert [tick for tick, _, _ in seen] == list(range(30))
    assert [timestamp for _, timestamp, _ in seen] == [float(tick) for tick in range(30)]  # background tasks
    assert any(healthy for _, _, healthy in seen[5:])  # never move the simulated clock


async def test_mode_flag_wins_over_a_policy_file_and_its_reloads(tmp_path):
    from watchdog.config import Policy

    policy = tmp_path / "policy.yaml"
    policy.write_text("action: {mode: enforce}\n")
    agents = []
    await run_simulated(SCENARIOS / "demo.yaml", port=0, ticks=2, speed=1e6, ready=lambda a, w: agents.append(a),
                        flags={"sampling": {"events": False}, "policy_file": str(policy), "mode_override": "observe"})
    [agent] = agents
    assert agent.action.policy.mode == "observe"
    agent.apply_policy(Policy.model_validate({"action": {"mode": "enforce"}}))
    assert agent.action.policy.mode == "observe"
