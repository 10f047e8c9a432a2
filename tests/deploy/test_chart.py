"""The Helm chart is the one source of every manifest: it lints, renders every documented values combination into
objects valid for Kubernetes 1.30 and the newest release (and the Prometheus Operator's CRDs), rejects misspelt
values, and deploy/*.yaml is its rendering with default values."""

from __future__ import annotations

import base64
import json
import sys

import helm_python
import kubernetes_validate
import pytest
import yaml

from tests.deploy.chart_helpers import (CHART, DOCUMENTED_OPTIONS, ROOT, find, leaf_paths, objects, one, render,
                                        validate)
from watchdog import __version__
from watchdog.config import Policy, check_file

sys.path.insert(0, str(ROOT / "tools"))
import render_manifests  # noqa: E402  (tools/ is not a package)


def test_helm_lint_finds_no_warning_or_error():
    for values in DOCUMENTED_OPTIONS.values():
        report = helm_python.lint(CHART, values, strict=True, kube_version="v1.30.0")
        assert report["errors"] == [], report
        assert [m for m in report["messages"] if m["severity"] >= 2] == [], report


@pytest.mark.parametrize("option", list(DOCUMENTED_OPTIONS))
def test_every_documented_option_renders_objects_valid_for_kubernetes_and_the_operator_crds(option):
    docs = objects(DOCUMENTED_OPTIONS[option])
    assert docs
    for doc in docs:
        validate(doc)


def test_a_field_kubernetes_does_not_know_is_caught():
    daemonset = one(objects(), "DaemonSet")
    daemonset["spec"]["template"]["spec"]["tolerations"][0]["efect"] = "NoSchedule"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(daemonset)


@pytest.mark.parametrize("values", [
    {"agnet": {"runtimeClassName": "nvidia"}},
    {"mode": "enforcing"},
    {"agent": {"tolerations": [{"key": "dedicated", "efect": "NoSchedule"}]}},
    {"monitoring": {"podMonitor": {"enable": True}}},
    {"image": {"digest": "latest"}},
])
def test_values_schema_rejects_typos(values):
    with pytest.raises(helm_python.HelmValuesError):
        render(values)


def test_deploy_manifests_are_the_chart_rendered_with_default_values():
    rendered = render_manifests.render_defaults()
    shipped = {path.name for path in (ROOT / "deploy").glob("*.yaml")}
    assert shipped == set(rendered), "run tools/render_manifests.py"
    for name, text in rendered.items():
        on_disk = (ROOT / "deploy" / name).read_text()
        assert list(yaml.safe_load_all(on_disk)) == list(yaml.safe_load_all(text)), (
            f"deploy/{name} differs from the chart: run tools/render_manifests.py")
        assert on_disk == render_manifests.manifest_text(name, text)  # comments too


def test_the_optional_objects_are_off_by_default():
    kinds = {doc["kind"] for doc in objects()}
    assert not kinds & {"PodMonitor", "ServiceMonitor", "PrometheusRule", "Secret"}


@pytest.mark.parametrize("option", list(DOCUMENTED_OPTIONS))
def test_every_rendered_settings_and_policy_file_is_accepted_by_the_agent(option, tmp_path):
    for doc in find(objects(DOCUMENTED_OPTIONS[option]), "ConfigMap"):
        for key, text in (doc.get("data") or {}).items():
            if key in ("settings.yaml", "policy.yaml"):
                path = tmp_path / key
                path.write_text(text)
                assert check_file(path)[1] == [], (doc["metadata"], key)


def policies(docs: list[dict]) -> list[Policy]:
    return [Policy.model_validate(yaml.safe_load(doc["data"]["policy.yaml"]))
            for doc in find(docs, "ConfigMap", "gpu-watchdog-policy")]


def test_mode_reaches_both_copies_of_the_policy_and_dry_run_is_the_default():
    assert {p.action.mode.value for p in policies(objects())} == {"dry-run"}
    enforced = policies(objects({"mode": "enforce"}))
    assert len(enforced) == 2 and {p.action.mode.value for p in enforced} == {"enforce"}


def test_the_chart_s_namespaces_stay_protected_whatever_the_inline_policy_lists():
    values = {"namespaces": {"agent": "gpu-agents", "controller": "gpu-ctl"},
              "policy": {"inline": {"action": {"protected_namespaces": ["prod"]}}}}
    for policy in policies(objects(values)):
        assert set(policy.action.protected_namespaces) >= {"prod", "gpu-agents", "gpu-ctl"}


def test_an_existing_policy_configmap_replaces_the_chart_s_in_both_namespaces():
    docs = objects({"policy": {"existingConfigMap": "my-gpu-policy"}})
    assert policies(docs) == []
    mounted = [volume["configMap"]["name"] for kind in ("DaemonSet", "Deployment")
               for volume in one(docs, kind)["spec"]["template"]["spec"]["volumes"] if volume["name"] == "policy"]
    assert mounted == ["my-gpu-policy", "my-gpu-policy"]


def pod(docs: list[dict], kind: str) -> dict:
    return one(docs, kind)["spec"]["template"]["spec"]


def test_agent_scheduling_values_reach_the_pod():
    values = DOCUMENTED_OPTIONS["scheduling of the agents"]["agent"]
    spec = pod(objects({"agent": values}), "DaemonSet")
    assert spec["runtimeClassName"] == "nvidia" and spec["priorityClassName"] == "gpu-critical"
    assert spec["tolerations"] == values["tolerations"] and spec["affinity"] == values["affinity"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true", **values["nodeSelector"]}  # Helm merges maps
    [pod_resources] = [v for v in spec["volumes"] if v["name"] == "pod-resources"]
    assert pod_resources["hostPath"]["path"] == "/var/lib/k0s/kubelet/pod-resources"
    [container] = spec["containers"]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9500}]
    assert container["resources"] == values["resources"]


def test_images_follow_the_version_unless_a_digest_pins_them():
    defaults = objects()
    assert pod(defaults, "DaemonSet")["containers"][0]["image"] == f"ghcr.io/gpu-watchdog/gpu-watchdog:{__version__}"
    assert pod(defaults, "Deployment")["containers"][0]["image"] == (
        f"ghcr.io/gpu-watchdog/gpu-watchdog-controller:{__version__}")
    pinned = objects(DOCUMENTED_OPTIONS["image digests and pull secrets"])
    assert pod(pinned, "DaemonSet")["containers"][0]["image"] == (
        "registry.example.com/gpu/gpu-watchdog@sha256:" + "a" * 64)
    assert pod(pinned, "Deployment")["containers"][0]["image"] == (
        "registry.example.com/gpu/gpu-watchdog-controller@sha256:" + "b" * 64)
    assert pod(pinned, "DaemonSet")["imagePullSecrets"] == [{"name": "regcred"}]


def test_one_version_source():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    assert f"gpu-watchdog:{__version__}" in (ROOT / "Dockerfile").read_text()  # the build line the README copies
    assert f"## [{__version__}]" in (ROOT / "CHANGELOG.md").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and 'version = {attr = "watchdog.__version__"}' in pyproject


def test_cli_prints_the_version(capsys):
    from watchdog.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.strip() == f"gpu-watchdog {__version__}"


def test_the_prometheus_rule_is_the_alerts_file():
    rule = one(objects({"monitoring": {"prometheusRule": {"enabled": True}}}), "PrometheusRule")
    assert rule["spec"] == yaml.safe_load((ROOT / "alerts" / "gpu-watchdog.rules.yaml").read_text())


def test_every_dashboard_ships_as_a_configmap_for_the_grafana_sidecar():
    docs = find(objects({"dashboards": {"enabled": True}}), "ConfigMap")
    shipped = {key: json.loads(text) for doc in docs if doc["metadata"]["labels"].get("grafana_dashboard") == "1"
               for key, text in doc["data"].items()}
    sources = {path.name: json.loads(path.read_text()) for path in (ROOT / "dashboards").glob("*.json")}
    assert sources and shipped == sources, "link each dashboards/*.json into the chart's files/dashboards/"


def test_generated_secrets_hold_a_token_and_a_certificate_for_the_service_name():
    from cryptography import x509

    docs = objects(DOCUMENTED_OPTIONS["generated secrets"])
    token = base64.b64decode(one(docs, "Secret", "gpu-watchdog-webhook")["data"]["webhook-token"])
    assert len(token) == 64
    tls = one(docs, "Secret", "gpu-watchdog-controller-tls")
    assert tls["type"] == "kubernetes.io/tls"
    cert = x509.load_pem_x509_certificate(base64.b64decode(tls["data"]["tls.crt"]))
    ca = x509.load_pem_x509_certificate(base64.b64decode(tls["data"]["ca.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)
    assert "gpu-watchdog-controller.gpu-watchdog-controller.svc" in names
    cert.verify_directly_issued_by(ca)


def test_the_agents_metrics_keep_their_own_namespace_and_pod_labels():
    [endpoint] = one(objects({"monitoring": {"podMonitor": {"enabled": True}}}), "PodMonitor")["spec"][
        "podMetricsEndpoints"]
    assert endpoint["honorLabels"] is True and endpoint["port"] == "metrics"


def test_other_namespaces_move_every_object_and_the_admission_policy_with_them():
    docs = objects(DOCUMENTED_OPTIONS["other namespaces"])
    namespaces = {doc["metadata"].get("namespace") for doc in docs} - {None}
    assert namespaces == {"gpu-agents", "gpu-ctl"}
    policy = yaml.safe_dump(one(docs, "ValidatingAdmissionPolicy", "gpu-watchdog-evictions"))
    assert "system:serviceaccount:gpu-agents:gpu-watchdog" in policy and "'gpu-ctl'" in policy
    policies = find(docs, "ValidatingAdmissionPolicy")
    assert len(policies) == 2  # the evictions' bounds and DRA objects read-only: both follow the service accounts
    for text in map(yaml.safe_dump, policies):
        assert "system:serviceaccount:gpu-agents:gpu-watchdog'" in text
        assert "system:serviceaccount:gpu-ctl:gpu-watchdog-controller'" in text
    assert {doc["metadata"]["name"] for doc in find(docs, "Namespace")} == {"gpu-agents", "gpu-ctl"}


def test_each_priority_class_the_chart_s_pods_use_gets_a_quota_in_their_namespace_unless_turned_off():
    def quotas(values: dict) -> dict[str, list[str]]:
        return {doc["metadata"]["namespace"]: doc["spec"]["scopeSelector"]["matchExpressions"][0]["values"]
                for doc in find(objects(values), "ResourceQuota")}

    assert quotas({}) == {"gpu-watchdog": ["system-node-critical"]}  # the controller sets no class by default
    both = DOCUMENTED_OPTIONS["scheduling of the controller"] | DOCUMENTED_OPTIONS["scheduling of the agents"]
    assert quotas(both) == {"gpu-watchdog": ["gpu-critical"], "gpu-watchdog-controller": ["system-cluster-critical"]}
    assert quotas({"agent": {"priorityClassName": ""}}) == {}
    assert quotas(DOCUMENTED_OPTIONS["no priority class quota"]) == {}


def test_without_the_controller_nothing_of_it_is_rendered():
    docs = objects({"controller": {"enabled": False}})
    assert not [doc for doc in docs if "controller" in doc["metadata"]["name"]]
    assert "gpu-watchdog-controller" not in render({"controller": {"enabled": False}})["templates/NOTES.txt"]


@pytest.mark.parametrize("option", list(DOCUMENTED_OPTIONS))
def test_no_option_weakens_the_pods_security_or_the_namespaces_pod_security_levels(option):
    docs = objects(DOCUMENTED_OPTIONS[option])
    agent = pod(docs, "DaemonSet")
    [container] = agent["containers"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert not any(agent.get(key) for key in ("hostNetwork", "hostPID", "hostIPC"))
    levels = {doc["metadata"]["name"]: doc["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
              for doc in find(docs, "Namespace")}
    assert set(levels.values()) <= {"privileged", "restricted"}
    for deployment in find(docs, "Deployment"):
        [controller] = deployment["spec"]["template"]["spec"]["containers"]
        context = controller["securityContext"]
        assert context["runAsNonRoot"] is True and context["runAsUser"] != 0
        assert levels.get(deployment["metadata"]["namespace"], "restricted") == "restricted"


def test_every_value_is_exercised_by_a_documented_option():
    documented = yaml.safe_load((CHART / "values.yaml").read_text())
    exercised = set().union(*(leaf_paths(values) for values in DOCUMENTED_OPTIONS.values()))
    missing = {path for path in leaf_paths(documented)
               if not any(used[:len(path)] == path for used in exercised)}
    assert missing == set()
