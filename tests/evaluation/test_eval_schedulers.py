"""The labelled suite covers every time-slicing scheduler model, so the evaluation scores the victim rule under each.

Only the scenarios' labels are read here; test_eval_targets scores them.
"""

from pathlib import Path
from typing import get_args

from watchdog.testbed.scenario import load_scenario
from watchdog.testbed.scenario_parts import GpuSpec

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_each_scheduler_model_has_a_time_sliced_culprit_and_benign_traps():
    culprits: dict[str, int] = {}
    traps: dict[str, int] = {}
    for path in sorted(SCENARIOS.glob("*.yaml")):
        scenario = load_scenario(path)
        truth = scenario.truth  # the evaluation's labels, read by watchdog.evaluation
        if not truth:
            continue  # unlabelled (the demo)
        for gpu in scenario.gpus:
            if gpu.mig is not None or not gpu.replicas:
                continue
            tally = culprits if truth.get("interference") else traps
            tally[gpu.scheduler] = tally.get(gpu.scheduler, 0) + 1
    models = get_args(GpuSpec.model_fields["scheduler"].annotation)
    assert set(models) == {"roundrobin", "proportional"}
    for model in models:
        assert culprits.get(model, 0) >= 2, f"no time-sliced culprit under {model}: {culprits}"
        assert traps.get(model, 0) >= 4, f"fewer than four benign time-sliced traps under {model}: {traps}"
