"""The scenario harness: which files it picks, that runs are deterministic, and how truth is resolved."""

from pathlib import Path

import pytest

from watchdog.config import ConfigError, Policy
from watchdog.evaluation import evaluate, format_table, scenario_files
from watchdog.evaluation.evaluate import evaluate_scenario, scenario_policy

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"


def test_directory_scan_skips_unlabelled_scenarios() -> None:
    names = {path.name for path in scenario_files([SCENARIOS])}
    assert "demo.yaml" not in names  # truth: {} = not labelled
    assert {"interference-power-mig.yaml", "trap-noisy-sensors.yaml", "xid-faults.yaml"} <= names
    assert scenario_files([SCENARIOS / "demo.yaml"]) == [SCENARIOS / "demo.yaml"]  # named explicitly: kept


def test_every_labelled_scenario_fits_the_size_budget() -> None:
    import yaml

    for path in scenario_files([SCENARIOS]):
        data = yaml.safe_load(path.read_text())
        ticks, gpus = data["duration_ticks"], len(data["gpus"])  # a size budget in ticks, not a timing check
        assert ticks <= 300 and gpus <= 2, path.name


def test_a_scenario_evaluates_the_same_twice() -> None:
    first = evaluate_scenario(SCENARIOS / "xid-faults.yaml")
    second = evaluate_scenario(SCENARIOS / "xid-faults.yaml")
    assert first.report == second.report
    # the Xid truth names the 1g.10gb by its index in the mig list; the finding carries its GPU instance id
    xid = first.scored.kinds["xid"]
    assert (xid.truths, xid.detected, xid.findings, xid.true_findings) == (2, 2, 2, 2)


def test_scenario_policy_overrides_are_validated_with_the_field() -> None:
    merged = scenario_policy({"action": {"interference": {"for_seconds": 5}}}, base=Policy(), source="s.yaml")
    assert merged.action.interference.for_seconds == 5 and merged.action.mode == Policy().action.mode
    with pytest.raises(ConfigError, match=r"action\.interference\.for_secnds"):
        scenario_policy({"action": {"interference": {"for_secnds": 5}}}, base=Policy(), source="s.yaml")


def test_table_names_kinds_and_scenario_problems(tmp_path: Path) -> None:
    scenario = (SCENARIOS / "trap-victim-own-drop.yaml").read_text()
    # Mislabel on purpose: claim interference the scenario does not contain, so the table must show a miss.
    labelled = scenario.replace("  interference: []", "  interference:\n"
                                "    - {victim: prod/serve, culprit: batch/fill, onset: 120}")
    path = tmp_path / "mislabelled.yaml"
    path.write_text(labelled)
    evaluation = evaluate([path])
    table = format_table(evaluation)
    assert "interference" in table and "memory_pressure" in table
    assert "missed interference" in table and "batch/fill" in table
    assert evaluation.kinds["interference"].recall == 0.0


def test_an_eviction_inside_a_no_evictions_window_is_a_problem(tmp_path: Path) -> None:
    """The harness checks *when* requests are sent, not only which pods: acting while blind is reported."""
    scenario = (SCENARIOS / "memory-pressure-timeslice.yaml").read_text()
    enforce = scenario.replace("  expect_evictions: [batch/grow]",
                               "  expect_evictions: [batch/grow]\n  no_evictions: [{onset: 0, reason: test}]")
    enforce += "policy:\n  action:\n    mode: enforce\n    memory_pressure: {for_seconds: 0}\n"
    path = tmp_path / "quiet.yaml"
    path.write_text(enforce)
    [result] = evaluate([path]).scenarios
    assert result.sent and all(pod == "batch/grow" for _, pod in result.sent)
    assert result.evictions_ok is True and result.quiet_violations == list(result.sent)
    table = format_table(evaluate([path]))
    assert "inside a no_evictions window" in table


def test_table_has_the_tick_columns_and_the_memory_warning_row() -> None:
    table = format_table(evaluate([SCENARIOS / "memory-pressure-mig.yaml"]))
    header = table.splitlines()[0].split()
    assert header[-4:] == ["prec.ticks", "ovh.med", "ovh.max", "dup."]
    row = next(line for line in table.splitlines() if line.startswith("memory_warning"))
    assert row.split()[2] == "1"  # the MIG-fill warning is labelled in its own row (hit or miss: test_eval_targets)
