"""The chart's README documents every value with its real default, and `make template`'s renderer applies the
user's values as `helm template` would."""

from __future__ import annotations

import re
import sys
from functools import reduce

import yaml

from tests.deploy.chart_helpers import CHART, ROOT, find, leaf_paths, one

sys.path.insert(0, str(ROOT / "tools"))
import render_manifests  # noqa: E402  (tools/ is not a package)

ROW = re.compile(r"^\| `([^`]+)` \| `(.*?)` \| (.+) \|$", flags=re.MULTILINE)


def readme_rows() -> dict[str, str]:
    return {path: default for path, default, _ in ROW.findall((CHART / "README.md").read_text())}


def test_every_value_has_a_row_with_its_default():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    rows = readme_rows()
    documented = {".".join(path) for path in leaf_paths(values)}
    assert set(rows) == documented, {"missing": documented - set(rows), "not a value": set(rows) - documented}
    for path, default in rows.items():
        actual = reduce(lambda node, key: node[key], path.split("."), values)
        assert yaml.safe_load(default) == actual, (path, default, actual)


def test_the_readme_explains_the_priority_class_quota():
    text = " ".join((CHART / "README.md").read_text().split())
    assert "Limit Priority Class consumption by default" in text and "priorityClassQuota.enabled: false" in text
    assert "make template" in text


def test_template_merges_values_files_and_set_like_helm(tmp_path, capsys):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("mode: enforce\nagent: {priorityClassName: gpu-critical, metricsPort: 9500}\n")
    second.write_text("agent: {metricsPort: 9600}\n")
    assert render_manifests.main(["--template", "--values", f"{first},{second}", "--set", "controller.replicas=3"]) == 0
    out = capsys.readouterr().out
    docs = [doc for doc in yaml.safe_load_all(out) if doc]
    assert docs[0]["kind"] == "Namespace"  # applied as printed: the namespaces come first
    spec = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "gpu-critical"  # from the first file, kept by the second
    assert spec["containers"][0]["ports"][0]["containerPort"] == 9600  # the later file wins
    assert one(docs, "Deployment")["spec"]["replicas"] == 3
    [quota] = find(docs, "ResourceQuota")
    assert quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"] == ["gpu-critical"]
    assert "enforce" in one(docs, "ConfigMap", "gpu-watchdog-policy", "gpu-watchdog")["data"]["policy.yaml"]
    out_dir = tmp_path / "rendered"
    assert render_manifests.main(["--template", "--out", str(out_dir)]) == 0
    assert sorted(path.name for path in out_dir.iterdir()) == sorted(render_manifests.render_defaults())
