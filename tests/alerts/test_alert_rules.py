"""The alert rules and the Alertmanager example are valid, tested, and speak the agent's metric contract.

promtool and amtool are the real Prometheus 2.42 / Alertmanager 0.25 tools (`make test` installs the Debian
packages); the rule unit tests in alerts/gpu-watchdog.rules.test.yaml are the behavioural tests, run here so a
broken rule fails the suite.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from watchdog.config.detection import DEFAULT_APPLICATION_XIDS, DEFAULT_CONTAINED_XIDS, DEFAULT_RESET_XIDS
from watchdog.controller.webhook import ACTION_LABEL, KIND_LABEL
from watchdog.model import REPORT_ONLY_KINDS, FindingKind
from watchdog.publishing import ALL_FAMILIES
from watchdog.publishing.controller_metrics import ISOLATION_FAMILIES

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "alerts"
RULES = ALERTS / "gpu-watchdog.rules.yaml"
RULE_TESTS = ALERTS / "gpu-watchdog.rules.test.yaml"
ALERTMANAGER = ALERTS / "alertmanager.example.yaml"
NAME = re.compile(r"\bgpu_watchdog_[a-z_]+\b")
RECORDED = re.compile(r"\bgpu_watchdog:[a-z_:]+")
STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
CATALOGUE = {family.name for family in ALL_FAMILIES + ISOLATION_FAMILIES}  # the agent's, the controller's audit


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False, cwd=REPO)


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def alerts() -> list[dict]:
    return [rule for rule in rules() if "alert" in rule]


@pytest.fixture
def checker(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "dashboards"))
    import promql_names

    return promql_names


def test_promtool_check_rules():
    done = run("promtool", "check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_promtool_rule_unit_tests_pass():
    done = run("promtool", "test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_unit_tests_catch_a_broken_rule(tmp_path):
    """The unit tests are not vacuous: an interference alert that waits 10 minutes instead of 5 fails them."""
    rule = 'gpu_watchdog_findings{kind="interference"}) > 0\n        for: '
    broken = RULES.read_text().replace(rule + "5m", rule + "10m")
    assert broken != RULES.read_text()
    (tmp_path / RULES.name).write_text(broken)
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    done = run("promtool", "test", "rules", str(tmp_path / RULE_TESTS.name))
    assert done.returncode == 1
    assert "alertname: InterferenceDetected" in done.stdout + done.stderr


def test_amtool_accepts_the_alertmanager_example():
    done = run("amtool", "check-config", str(ALERTMANAGER))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@pytest.mark.parametrize(
    ("labels", "receivers"),
    [
        ((f"{ACTION_LABEL}=evict", "alertname=TenantGpuQuotaExceeded", "namespace=team-q", "pod=big-0"),
         "gpu-watchdog-controller,oncall"),
        (("alertname=QuotaBreach", "severity=warning"), "oncall"),
        ((f"{ACTION_LABEL}=notify", "alertname=GpuLost"), "oncall"),
    ],
)
def test_only_action_alerts_reach_the_controller(labels, receivers):
    done = run("amtool", "config", "routes", "test", f"--config.file={ALERTMANAGER}", *labels)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == receivers


def test_controller_receiver_uses_bearer_credentials_file_and_no_resolved():
    config = yaml.safe_load(ALERTMANAGER.read_text())
    receiver = next(r for r in config["receivers"] if r["name"] == "gpu-watchdog-controller")
    (webhook,) = receiver["webhook_configs"]
    assert webhook["url"].endswith("/api/v1/alertmanager")
    assert webhook["send_resolved"] is False
    authorization = webhook["http_config"]["authorization"]
    assert authorization["type"] == "Bearer" and authorization["credentials_file"].startswith("/")
    assert "credentials" not in authorization  # never a token inline in a config file


def test_every_metric_in_the_rules_is_exported_by_the_agent():
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    for rule in rules():
        expr = STRING.sub('""', rule["expr"])
        names = set(NAME.findall(expr))
        assert names <= CATALOGUE, f"{rule.get('alert') or rule.get('record')}: {sorted(names - CATALOGUE)}"
        assert set(RECORDED.findall(expr)) <= recorded
    assert all(RECORDED.fullmatch(name) for name in recorded)  # level:metric:operation


def test_every_label_a_rule_selects_or_groups_by_exists(checker):
    for rule in rules():
        assert checker.problems(rule["expr"]) == [], rule.get("alert") or rule.get("record")


def test_every_alert_has_severity_summary_and_description():
    for alert in alerts():
        assert alert["labels"]["severity"] in ("critical", "warning", "info"), alert["alert"]
        annotations = alert["annotations"]
        assert annotations["summary"].strip() and len(annotations["description"]) > 100, alert["alert"]


def test_every_alert_fires_and_stays_quiet_in_the_unit_tests():
    cases: dict[str, list[list]] = {}
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            cases.setdefault(check["alertname"], []).append(check.get("exp_alerts") or [])
    for alert in alerts():
        outcomes = cases.get(alert["alert"], [])
        assert any(outcomes), f"{alert['alert']}: no test where it fires"
        assert any(not expected for expected in outcomes), f"{alert['alert']}: no test where it stays quiet"
        for expected in (e for outcome in outcomes for e in outcome):
            assert expected["exp_labels"]["severity"] == alert["labels"]["severity"]
            assert set(expected["exp_annotations"]) == set(alert["annotations"])


def test_the_required_alerts_exist():
    names = {alert["alert"] for alert in alerts()}
    assert names >= {
        "GPUWatchdogDown", "GPUWatchdogNotReady", "GpuLost", "XidCritical", "XidApplication", "MigMemoryNearFull",
        "GpuPowerCapped", "InterferenceDetected", "QuotaBreach", "MigMemoryWarning", "UnauthorizedGpuUse",
        "EvictionsFailing",
        "EvictionsPaused", "StageDegraded", "AttributionDegraded", "TenantGpuQuotaExceeded",
    }


def test_only_the_opt_in_group_asks_the_controller_to_act():
    groups = yaml.safe_load(RULES.read_text())["groups"]
    for group in groups:
        for rule in group["rules"]:
            asks = rule.get("labels", {}).get(ACTION_LABEL)
            assert (asks == "evict") == (group["name"] == "gpu-watchdog.actions"), rule.get("alert")
    (action,) = next(g for g in groups if g["name"] == "gpu-watchdog.actions")["rules"]
    assert action["alert"] == "TenantGpuQuotaExceeded"
    assert FindingKind(action["labels"][KIND_LABEL]) is FindingKind.QUOTA
    # the controller needs the namespace; it comes from the finding's culprit, never from a victim
    assert '"namespace", "$1", "culprit_namespace"' in action["expr"]
    assert 'culprit_pod!=""' in action["expr"]
    # a pod is named only from the culprit (device-bound breaches); the tenant-wide branch leaves the choice to the
    # controller, which picks the tenant's lowest-priority evictable GPU pod on the node
    assert '"pod", "$1", "culprit_pod"' in action["expr"] and "pod" not in action["labels"]


def test_every_alert_that_can_act_keeps_the_node_and_the_device():
    """An eviction request without its node could let a breach on node-a evict on node-b, so every aggregation in
    an action alert keeps `node` (and the device labels where it keeps a pod); no report-only finding kind feeds it."""
    for alert in alerts():
        if alert.get("labels", {}).get(ACTION_LABEL) != "evict":
            continue
        expr = alert["expr"]
        assert " without " not in f" {expr} ", alert["alert"]
        groupings = [{label.strip() for label in found.split(",")} for found in re.findall(r"by \(([^)]*)\)", expr)]
        assert groupings and all("node" in labels for labels in groupings), alert["alert"]
        assert all({"gpu_uuid", "mig_uuid"} <= labels for labels in groupings if "culprit_pod" in labels)
        kinds = {FindingKind(kind) for kind in re.findall(r'kind="([a-z_]+)"', expr)}
        assert kinds and not kinds & REPORT_ONLY_KINDS, alert["alert"]


def test_xid_classes_match_the_detection_defaults():
    by_name = {alert["alert"]: alert["expr"] for alert in alerts()}

    def listed(expr: str) -> set[int]:
        lists = set(re.findall(r'xid=~"([0-9|]+)"', expr))
        assert len(lists) == 1, "both branches of an Xid rule must list the same codes"
        return {int(code) for code in lists.pop().split("|")}

    assert listed(by_name["XidCritical"]) == set(DEFAULT_RESET_XIDS)
    assert listed(by_name["XidApplication"]) == set(DEFAULT_APPLICATION_XIDS) | set(DEFAULT_CONTAINED_XIDS)



def test_the_alerting_guide_names_every_alert_and_only_real_metrics():
    guide = (REPO / "docs" / "alerting.md").read_text()
    for alert in alerts():
        assert f"| {alert['alert']} |" in guide, f"{alert['alert']} is not in docs/alerting.md"
    assert set(NAME.findall(guide)) - {ACTION_LABEL, KIND_LABEL} <= CATALOGUE  # those two are alert labels
