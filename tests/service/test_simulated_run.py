"""`run --simulate` / `record --simulate`: the production run loop on a world, one simulated tick per cycle."""

from __future__ import annotations

import time
from datetime import datetime

from tests.service.conftest import SCENARIOS
from watchdog.testbed.runner import run_simulated


async def test_bounded_simulated_run_moves_one_tick_per_cycle():
    seen: list[tuple[int, float, bool]] = []

    class Seen:
        stage = "test"

        def tick_done(self, result) -> None:
            seen.append((result.sample.tick, result.sample.timestamp, result.attribution.healthy))

    started = time.time()
    worlds = []
    await run_simulated(SCENARIOS / "demo.yaml", port=0, ticks=30, speed=1e6, sinks=(Seen(),),
                        flags={"sampling": {"events": False}}, ready=lambda agent, world: worlds.append(world))
    assert [tick for tick, _, _ in seen] == list(range(30))
    first = seen[0][1]  # the world's clock starts at the wall time, not at 1970 …
    assert started <= first <= time.time()
    assert [timestamp - first for _, timestamp, _ in seen] == [float(tick) for tick in range(30)]  # background tasks
    # … and the fake API server stamps objects on the same time line: `kubectl describe` ages read as now.
    created = [datetime.fromisoformat(pod["metadata"]["creationTimestamp"].replace("Z", "+00:00")).timestamp()
               for pod in worlds[0].api.objects("pods")]
    assert created and all(started - 1 <= stamp <= first + 30 for stamp in created)
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
