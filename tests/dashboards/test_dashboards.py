"""The committed Grafana dashboards are current, MIG-correct, and query only metrics the agent exports.

A dashboard that names a metric or label the agent does not export shows an empty panel, not an error, so these
tests read the committed JSON the way Grafana would and hold every query against watchdog.publishing's catalogue.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from watchdog.publishing import ALL_FAMILIES
from watchdog.publishing.controller_metrics import ISOLATION_FAMILIES

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = REPO / "dashboards"
FILES = ("gpu-watchdog-node.json", "gpu-watchdog-actions.json")
NAME = re.compile(r"gpu_watchdog_[a-z_]+")
STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
CATALOGUE = {family.name: family for family in ALL_FAMILIES + ISOLATION_FAMILIES}
# Whole-GPU utilisation series: NVML does not report them in MIG mode, so a panel must exclude MIG GPUs.
WHOLE_GPU_UTILISATION = (
    "gpu_watchdog_gpu_utilization_ratio",
    "gpu_watchdog_gpu_memory_utilization_ratio",
    "gpu_watchdog_gpu_sm_utilization_ratio",
    "gpu_watchdog_gpu_dram_bandwidth_utilization_ratio",
)


@pytest.fixture
def generator(monkeypatch):
    """The dashboards/ modules, importable the way `python dashboards/generate.py` imports them."""
    monkeypatch.syspath_prepend(str(DASHBOARDS))
    import generate
    import promql_names

    return generate, promql_names


def load(name: str) -> dict:
    return json.loads((DASHBOARDS / name).read_text(encoding="utf-8"))


def all_panels(document: dict) -> list[dict]:
    panels = []
    for panel in document["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels


def all_exprs(document: dict) -> list[str]:
    exprs = [target["expr"] for panel in all_panels(document) for target in panel.get("targets", [])]
    exprs += [v["query"] for v in document["templating"]["list"] if v["type"] == "query"]
    return exprs


def family_of(name: str):
    """Independent of dashboards/promql_names: `_bucket/_sum/_count` only when a histogram/summary has them."""
    if name in CATALOGUE:
        return CATALOGUE[name]
    for suffix in ("_bucket", "_sum", "_count"):
        base = CATALOGUE.get(name.removesuffix(suffix))
        if name.endswith(suffix) and base is not None and base.kind in ("histogram", "summary"):
            return base
    return None


def test_regenerating_gives_byte_identical_files(tmp_path):
    done = subprocess.run(
        [sys.executable, str(DASHBOARDS / "generate.py"), "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    for name in FILES:
        assert (tmp_path / name).read_bytes() == (DASHBOARDS / name).read_bytes(), f"{name} is stale: regenerate it"
    check = subprocess.run(
        [sys.executable, str(DASHBOARDS / "generate.py"), "--check"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert check.returncode == 0, check.stderr


def test_check_mode_reports_a_stale_file(tmp_path):
    (tmp_path / FILES[0]).write_text("{}\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(DASHBOARDS / "generate.py"), "--check", "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 1
    assert FILES[0] in done.stderr and FILES[1] in done.stderr  # one differs, one is missing
    assert not (tmp_path / FILES[1]).exists()  # --check writes nothing


@pytest.mark.parametrize("name", FILES)
def test_every_metric_name_is_in_the_catalogue(name):
    used = {metric for expr in all_exprs(load(name)) for metric in NAME.findall(STRING.sub('""', expr))}
    assert used, "a dashboard without gpu-watchdog queries"
    unknown = sorted(metric for metric in used if family_of(metric) is None)
    assert unknown == []


@pytest.mark.parametrize("name", FILES)
def test_every_label_and_legend_exists_on_its_family(name, generator):
    generate, _ = generator
    assert generate.validate(load(name)) == []


@pytest.mark.parametrize("name", FILES)
def test_structure_schema_ids_and_grid(name):
    document = load(name)
    assert document["schemaVersion"] == 41  # Grafana 11.6
    ids = [panel["id"] for panel in all_panels(document)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in all_panels(document):
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, f"panel {panel['title']!r} leaves the 24-column grid"
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel.get("targets"), f"panel {panel['title']!r} has no query"
            assert panel.get("description"), f"panel {panel['title']!r} has no description"
            assert len({target["refId"] for target in panel["targets"]}) == len(panel["targets"])


@pytest.mark.parametrize("name", FILES)
def test_panel_titles_are_unique_within_a_dashboard(name):
    """A title names one panel: two alike cannot be told apart in a link, a search or an alert's runbook."""
    titles = [panel["title"] for panel in all_panels(load(name))]
    assert sorted({t for t in titles if titles.count(t) > 1}) == []


def test_dashboard_uids_are_unique_and_stable():
    uids = [load(name)["uid"] for name in FILES]
    assert uids == ["gpu-watchdog-node", "gpu-watchdog-actions"]


@pytest.mark.parametrize("name", FILES)
def test_variables_datasource_node_namespace(name):
    variables = {v["name"]: v for v in load(name)["templating"]["list"]}
    assert list(variables) == ["datasource", "node", "namespace"]
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for filter_name in ("node", "namespace"):
        variable = variables[filter_name]
        assert variable["type"] == "query" and variable["multi"] and variable["includeAll"]
        assert variable["allValue"] == ".*"  # "All" must keep series whose label is empty
        assert variable["datasource"]["uid"] == "${datasource}"
    # every query is filtered by node
    for expr in all_exprs(load(name)):
        # The controller's isolation audit is cluster-wide: its series have no node.
        if "label_values(gpu_watchdog_ready" not in expr and "gpu_watchdog_isolation_" not in expr:
            assert 'node=~"$node"' in expr, expr


def test_whole_gpu_utilisation_never_shows_mig_gpus():
    for name in FILES:
        for expr in all_exprs(load(name)):
            if any(re.search(rf"\b{metric}\b", expr) for metric in WHOLE_GPU_UTILISATION):
                assert 'gpu_watchdog_gpu_info{node=~"$node", mig_mode="disabled"}' in expr, expr
                assert "on (node, gpu_uuid) group_left ()" in expr, expr


def test_node_dashboard_covers_gpus_mig_instances_pods_and_faults():
    exprs = " ".join(all_exprs(load("gpu-watchdog-node.json")))
    for metric in (
        "mig_memory_used_bytes", "mig_memory_total_bytes", "mig_dram_bandwidth_utilization_ratio",
        "mig_sm_utilization_ratio", "mig_sm_occupancy_ratio", "gpu_sm_clock_hertz", "gpu_sm_clock_max_hertz",
        "gpu_throttled", "gpu_power_watts", "gpu_power_limit_watts", "gpu_temperature_celsius",
        "gpu_pcie_tx_bytes_per_second", "gpu_pcie_rx_bytes_per_second", "xid_errors_total",
        "pod_sm_utilization_ratio", "gpu_lost",
    ):
        assert f"gpu_watchdog_{metric}" in exprs, metric
    assert "increase(gpu_watchdog_xid_errors_total{" in exprs and "[$__range]" in exprs
    assert "unless gpu_watchdog_xid_errors_total{" in exprs  # a series born at 1 counts its first sample
    assert "sum by (node, gpu, gpu_instance, xid)" in exprs  # Xids per GPU instance
    assert 'gpu_watchdog_pod_sm_utilization_ratio{node=~"$node", namespace=~"$namespace", mig_uuid=""}' in exprs
    panels = all_panels(load("gpu-watchdog-node.json"))
    legends = [target.get("legendFormat", "") for panel in panels for target in panel.get("targets", [])]
    assert any("{{namespace}}/{{pod}}" in legend and "{{gpu_instance}}" in legend for legend in legends)


def test_actions_dashboard_covers_findings_evictions_and_health():
    exprs = " ".join(all_exprs(load("gpu-watchdog-actions.json")))
    for clause in (
        "sum by (kind, severity) (gpu_watchdog_findings", "sum by (result) (((gpu_watchdog_evictions_total",
        "sum by (reason) (((gpu_watchdog_evictions_total", "sum by (namespace) (((gpu_watchdog_evictions",
        "unless gpu_watchdog_evictions_total{", "or increase(gpu_watchdog_evictions_total{",
        "gpu_watchdog_mode{", "gpu_watchdog_evictions_paused{", "gpu_watchdog_stage_success{",
        "gpu_watchdog_stage_duration_seconds{", "gpu_watchdog_errors_total{", "gpu_watchdog_policy_reloads_total{",
    ):
        assert clause in exprs, clause


def test_the_checker_flags_unknown_names_and_labels(generator):
    _, promql_names = generator
    assert promql_names.problems('sum by (pod) (gpu_watchdog_gpu_power_watts{mig_uuid="x"})') == [
        "gpu_watchdog_gpu_power_watts has no label 'mig_uuid' (selector)",
        "by (pod): no metric inside the aggregation has that label",
    ]
    assert promql_names.problems("gpu_watchdog_evictions_total_count") == [
        "unknown metric gpu_watchdog_evictions_total_count"  # counters have no _count sample
    ]
    assert promql_names.problems("gpu_watchdog_ready * on (gpu) gpu_watchdog_gpu_lost") == [
        "on (gpu): not a label of gpu_watchdog_ready"
    ]
    assert promql_names.problems("label_values(gpu_watchdog_ready, pod)") == [
        "label_values: gpu_watchdog_ready has no label 'pod'"
    ]
    assert promql_names.legend_problems("{{node}}", "sum by (kind) (gpu_watchdog_findings)") != []
    assert promql_names.problems('gpu_watchdog_gpu_lost{node=~"a|gpu_watchdog_fake"}') == []  # values not scanned


def test_generation_refuses_a_query_the_catalogue_does_not_back(generator, monkeypatch, tmp_path, capsys):
    generate, _ = generator
    from grafana_foundation_sdk.builders.dashboard import Dashboard

    import dashboard_panels

    def broken():
        ids = dashboard_panels.PanelIds()
        panel = dashboard_panels.time_series(
            ids, title="bad", description="bad", queries=(dashboard_panels.Query("gpu_watchdog_gpu_util"),)
        )
        return Dashboard("broken").uid("broken").with_panel(panel)

    monkeypatch.setattr(generate, "BUILDERS", {"broken.json": broken})
    assert generate.main(["--output-dir", str(tmp_path)]) == 2
    assert "unknown metric gpu_watchdog_gpu_util" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# What Grafana substitutes before a query reaches Prometheus (any valid value will do for a syntax check).
GRAFANA_VARIABLES = {"$__rate_interval": "2m", "$__range": "6h", "$node": ".*", "$namespace": ".*"}


def test_every_panel_query_is_valid_promql(tmp_path):
    """promtool parses each panel query (variables substituted) as a recording rule: a typo fails here, not in
    front of an operator. Variable queries (`label_values(…)`) are Grafana syntax, not PromQL, and are skipped."""
    records = []
    for name in FILES:
        for panel in all_panels(load(name)):
            for target in panel.get("targets", []):
                expr = target["expr"]
                for variable, value in GRAFANA_VARIABLES.items():
                    expr = expr.replace(variable, value)
                assert "$" not in expr, f"unsubstituted variable in {expr}"
                records.append({"record": f"dashboard:panel_{len(records)}:check", "expr": expr})
    rule_file = tmp_path / "dashboard-queries.rules.yaml"
    rule_file.write_text(json.dumps({"groups": [{"name": "dashboard-queries", "rules": records}]}))
    done = subprocess.run(
        ["promtool", "check", "rules", str(rule_file)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(records)} rules found" in done.stdout


def test_context_switching_panel_shows_share_and_rate_per_gpu_and_gpu_instance_on_two_axes():
    [panel] = [p for p in all_panels(load("gpu-watchdog-node.json")) if p["title"] == "Context switching"]
    metrics = {target["refId"]: NAME.findall(target["expr"])[0] for target in panel["targets"]}
    assert metrics == {"A": "gpu_watchdog_gpu_context_switch_active_ratio",
                       "B": "gpu_watchdog_mig_context_switch_active_ratio",
                       "C": "gpu_watchdog_gpu_context_switches_per_second",
                       "D": "gpu_watchdog_mig_context_switches_per_second"}
    assert panel["fieldConfig"]["defaults"]["unit"] == "percentunit"
    right = {override["matcher"]["options"]: {p["id"]: p["value"] for p in override["properties"]}
             for override in panel["fieldConfig"]["overrides"] if override["matcher"]["id"] == "byFrameRefID"}
    assert right == {ref: {"unit": "reqps", "custom.axisPlacement": "right"} for ref in ("C", "D")}
