"""alerts/dcgm-compat.rules.yaml: dcgm-exporter's names and labels for MIG memory and utilisation, promtool-tested."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from watchdog.publishing import ALL_FAMILIES

ALERTS = Path(__file__).resolve().parents[2] / "alerts"
RULES = ALERTS / "dcgm-compat.rules.yaml"
RULE_TESTS = ALERTS / "dcgm-compat.rules.test.yaml"
DCGM_NAMES = {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY",
              "DCGM_FI_PROF_DRAM_ACTIVE"}


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60, check=False)


def test_rules_are_valid_and_their_unit_tests_pass():
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0 and "SUCCESS: 5 rules found" in checked.stdout, checked.stdout + checked.stderr
    tested = promtool("test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_unit_tests_catch_a_wrong_unit(tmp_path):
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    (tmp_path / RULES.name).write_text(RULES.read_text().replace("/ 1048576", "/ 1000000"))  # MB, not MiB
    tested = promtool("test", "rules", str(tmp_path / RULE_TESTS.name))
    assert tested.returncode != 0 and "DCGM_FI_DEV_FB_USED" in tested.stdout + tested.stderr


def test_records_dcgm_names_from_exported_metrics_only():
    rules = [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    assert {rule["record"] for rule in rules} == DCGM_NAMES
    catalogue = {family.name for family in ALL_FAMILIES}
    for rule in rules:
        assert set(re.findall(r"\bgpu_watchdog_[a-z_]+\b", rule["expr"])) <= catalogue, rule["record"]
        assert "alert" not in rule  # recording only: the opt-in file never pages anyone
