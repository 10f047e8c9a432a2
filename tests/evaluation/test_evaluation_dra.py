"""The offline run of a DRA scenario goes through the same claim resolution and hold-back as the agent."""

from __future__ import annotations

from pathlib import Path

from watchdog.evaluation.scenario_run import simulate
from watchdog.model import ClaimRef
from watchdog.testbed import load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_a_mig_device_created_at_claim_time_is_held_back_until_its_slice_names_it():
    scenario = load_scenario(SCENARIOS / "dra-dynamic-mig.yaml")
    scenario.duration_ticks = 160
    seen: dict[int, tuple[bool, ClaimRef | None]] = {}
    for sample, attribution in simulate(scenario):
        pids = [(mig.uuid, p.pid) for gpu in sample.gpus for mig in gpu.instances for p in mig.processes]
        if pids:
            uuid, pid = pids[0]
            seen[sample.tick] = (pid in attribution.processes, attribution.claims.get((uuid, "ml/notebook")))
    first = min(seen)
    assert 40 <= first < 45 and all(not attributed for tick, (attributed, _) in seen.items() if tick < 45)
    assert all(attributed and claim == ClaimRef("ml", "notebook-mig-1g")
               for tick, (attributed, claim) in seen.items() if 45 <= tick < 150)
    assert max(seen) < 152  # the device is gone once the driver deletes it
