"""Render the Helm chart with the real Helm engine and check what comes out against published schemas.

helm-python-sdk embeds Helm's own engine (Go templates, sprig, values.schema.json, lint); kubernetes-validate holds
the Kubernetes API's OpenAPI schemas per release; the Prometheus Operator's CRDs are vendored in crds/ (SOURCE.md).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Iterator

import helm_python
import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "gpu-watchdog"
CRDS = Path(__file__).resolve().parent / "crds"
# kubernetes-validate reads and parses a release's ~5 MB _definitions.json on every call; read each file once.
kubernetes_validate.utils.schema_contents = functools.cache(kubernetes_validate.utils.schema_contents)

# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion; ValidatingAdmissionPolicy v1) and the newest
# release kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())

# Every documented option of values.yaml, alone or in the combination the README's install section uses.
DOCUMENTED_OPTIONS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "enforce": {"mode": "enforce"},
    "observe": {"mode": "observe"},
    "image digests and pull secrets": {"image": {
        "repository": "registry.example.com/gpu/gpu-watchdog", "tag": "0.1.0-rc1", "pullPolicy": "Always",
        "digest": "sha256:" + "a" * 64, "controllerDigest": "sha256:" + "b" * 64, "pullSecrets": ["regcred"]}},
    "own controller repository": {"image": {"controllerRepository": "registry.example.com/gpu/ctl"}},
    "scheduling of the agents": {"agent": {
        "nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/mig.capable", "operator": "In", "values": ["true"]}]}]}}},
        "runtimeClassName": "nvidia", "priorityClassName": "gpu-critical",
        "kubeletRootDir": "/var/lib/k0s/kubelet", "metricsPort": 9500,
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "settings": {"sampling": {"interval_seconds": 2.0}}}},
    "scheduling of the controller": {"controller": {
        "replicas": 3, "nodeSelector": {"kubernetes.io/os": "linux"}, "priorityClassName": "system-cluster-critical",
        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}], "port": 8443,
        "resources": {"requests": {"cpu": "20m", "memory": "96Mi"}, "limits": {"memory": "384Mi"}},
        "settings": {"controller": {"isolation_audit_minutes": 0}},
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "gpu-watchdog-controller"}}}]}}}},
    "generated secrets": {"controller": {"webhookToken": {"generate": True},
                                         "tls": {"generate": True, "validityDays": 90}}},
    "own secrets": {"controller": {"webhookToken": {"secretName": "am-token"}, "tls": {"secretName": "my-tls"}}},
    "existing policy": {"policy": {"existingConfigMap": "my-gpu-policy"}},
    "inline policy": {"policy": {"inline": {"action": {"protected_namespaces": ["kube-system", "gpu-watchdog",
                                                                                "gpu-watchdog-controller", "prod"]}}}},
    "no controller": {"controller": {"enabled": False}},
    "existing namespaces, no admission policy": {"namespaces": {"create": False},
                                                 "admissionPolicy": {"enabled": False}},
    "no priority class quota": {"priorityClassQuota": {"enabled": False}},
    "other namespaces": {"namespaces": {"agent": "gpu-agents", "controller": "gpu-ctl"}},
    "prometheus operator": {"monitoring": {
        "podMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "kube-prometheus-stack"}},
        "serviceMonitor": {"enabled": True, "interval": "1m", "labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}}},
    "service monitor with own tls": {"monitoring": {"serviceMonitor": {
        "enabled": True, "tlsConfig": {"insecureSkipVerify": True}}}},
    "dashboards": {"dashboards": {"enabled": True, "namespace": "monitoring", "folder": "GPU",
                                  "labels": {"grafana_dashboard": "1", "team": "platform"}}},
    "fleet what-if": {"whatif": {"enabled": True}},
    "fleet what-if, own token and paths": {"whatif": {
        "enabled": True, "port": 9600, "token": {"secretName": "my-whatif-token", "generate": False},
        "flightRecorderPath": "/data/gpu-watchdog/flight", "networkPolicy": False}},
    "readme install": {"mode": "enforce", "image": {"repository": "registry.example.com/gpu-watchdog"},
                       "controller": {"webhookToken": {"generate": True}, "tls": {"generate": True}},
                       "monitoring": {"podMonitor": {"enabled": True}, "serviceMonitor": {"enabled": True},
                                      "prometheusRule": {"enabled": True}},
                       "dashboards": {"enabled": True}},
}


def leaf_paths(values: dict, prefix: tuple = ()) -> set[tuple]:
    """Paths to every setting; maps whose keys are the user's own (labels, nodeSelector…) count as one setting."""
    free_form = {"nodeSelector", "affinity", "resources", "settings", "inline", "labels", "tlsConfig"}
    paths = set()
    for key, value in values.items():
        if isinstance(value, dict) and value and key not in free_form:
            paths |= leaf_paths(value, (*prefix, key))
        else:
            paths.add((*prefix, key))
    return paths


@functools.cache
def chart() -> helm_python.Chart:
    return helm_python.Chart.load(CHART)


def render(values: dict[str, Any] | None = None) -> dict[str, str]:
    """Template path (templates/<name>) → rendered text, as `helm template gpu-watchdog … -n gpu-watchdog`."""
    rendered = chart().render(values or {}, name="gpu-watchdog", namespace="gpu-watchdog")
    return {path.split("/", 1)[1]: text for path, text in rendered.items()}


def objects(values: dict[str, Any] | None = None) -> list[dict]:
    return [doc for path, text in sorted(render(values).items()) if path.endswith(".yaml")
            for doc in yaml.safe_load_all(text) if doc]


def find(docs: list[dict], kind: str, name: str | None = None, namespace: str | None = None) -> list[dict]:
    return [doc for doc in docs if doc["kind"] == kind and (name is None or doc["metadata"]["name"] == name)
            and (namespace is None or doc["metadata"].get("namespace") == namespace)]


def one(docs: list[dict], kind: str, name: str | None = None, namespace: str | None = None) -> dict:
    [found] = find(docs, kind, name, namespace)
    return found


@functools.cache
def crd_schemas() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) → the CRD version's openAPIV3Schema."""
    found = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        for version in crd["spec"]["versions"]:
            key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
            found[key] = version["schema"]["openAPIV3Schema"]
    return found


def undeclared_fields(value: Any, schema: dict, where: str = "") -> Iterator[str]:
    """Fields the structural schema does not declare: the API server would drop them without a word."""
    if isinstance(value, dict) and schema.get("type") == "object":
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if properties is not None and key in properties:
                yield from undeclared_fields(item, properties[key], f"{where}.{key}")
            elif isinstance(extra, dict):
                yield from undeclared_fields(item, extra, f"{where}.{key}")
            elif properties is not None and not (where == "" and key in ("apiVersion", "kind", "metadata")):
                yield f"{where}.{key}"
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            yield from undeclared_fields(item, schema["items"], f"{where}[{index}]")


def validate(doc: dict) -> None:
    """Raise when the object is not valid for every Kubernetes release of KUBERNETES_VERSIONS (or its CRD)."""
    key = (doc["apiVersion"], doc["kind"])
    if key in crd_schemas():
        schema = crd_schemas()[key]
        # No meta-schema check: the CRDs carry Go (RE2) patterns, e.g. "^(?i)(abort|warn)?$", Python refuses.
        jsonschema.Draft4Validator(schema).validate(doc)
        undeclared = list(undeclared_fields(doc, schema))
        assert not undeclared, f"{doc['kind']}/{doc['metadata']['name']}: fields not in the CRD: {undeclared}"
        return
    for version in KUBERNETES_VERSIONS:
        _validate_for_kubernetes(json.dumps(doc, sort_keys=True), version)


@functools.cache
def _validate_for_kubernetes(doc: str, version: str) -> None:
    """Once per distinct object: most objects render the same under many values combinations."""
    kubernetes_validate.validate(json.loads(doc), version, strict=True)
