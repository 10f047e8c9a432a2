"""RBAC grants each identity exactly the calls watchdog/kube/permissions.py declares, and the client the agent and the
controller use refuses any other call before sending it."""

from __future__ import annotations

import re

import pytest
from kubernetes.aio import client as k8s

from tests.deploy.chart_helpers import DOCUMENTED_OPTIONS, ROOT, find, objects, one
from watchdog.config.kube import KubeSettings
from watchdog.kube import KubeApi, KubeUnavailable
from watchdog.kube.permissions import CLIENT_OPERATIONS, PERMISSIONS, KubeCallNotDeclared

CALL = re.compile(r"\bapi\.(?:core|coordination|events|policy|resource|scheduling)\.([a-z_]+)\(")
SERVICE_ACCOUNTS = {"gpu-watchdog": "agent", "gpu-watchdog-controller": "controller"}


def granted(values: dict) -> set[tuple]:
    """(identity, scope, group, resource, verb, resourceNames) for every rule bound to one of the two accounts."""
    docs = objects(values)
    agent_ns = one(docs, "DaemonSet")["metadata"]["namespace"]
    scopes = {agent_ns: "agent-namespace", one(docs, "Deployment")["metadata"]["namespace"]: "controller-namespace"}
    rows = set()
    for binding_kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        for binding in find(docs, binding_kind):
            namespace = binding["metadata"].get("namespace")
            role = one(docs, role_kind, binding["roleRef"]["name"], namespace)
            scope = scopes[namespace] if namespace else "cluster"
            for subject in binding["subjects"]:
                identity = SERVICE_ACCOUNTS[subject["name"]]
                assert subject["kind"] == "ServiceAccount" and subject["namespace"] in scopes
                for rule in role["rules"]:
                    rows |= {(identity, scope, group, resource, verb, tuple(rule.get("resourceNames", ())))
                             for group in rule["apiGroups"] for resource in rule["resources"]
                             for verb in rule["verbs"]}
    return rows


@pytest.mark.parametrize("option", ["defaults", "other namespaces"])
def test_rbac_grants_exactly_the_declared_calls(option):
    declared = {(p.identity, p.scope, p.group, p.resource, p.verb, p.names) for p in PERMISSIONS}
    rbac = granted(DOCUMENTED_OPTIONS[option])
    assert rbac - declared == set(), "granted but never called: drop it from the chart's rbac.yaml"
    assert declared - rbac == set(), "called but not granted: add it to the chart's rbac.yaml"


def test_every_declared_operation_exists_in_the_client():
    apis = (k8s.CoreV1Api, k8s.ResourceV1Api, k8s.CoordinationV1Api)
    for operation in CLIENT_OPERATIONS:
        assert any(hasattr(api, f"{operation}_without_preload_content") for api in apis), operation


async def test_the_agent_s_client_refuses_an_undeclared_call_before_sending_it():
    api = await KubeApi.from_settings(KubeSettings(access="url", url="http://127.0.0.1:9", request_timeout_seconds=1))
    async with api:
        with pytest.raises(KubeCallNotDeclared, match="delete pods"):
            await api.request_json("DELETE", "/api/v1/namespaces/ml/pods/train")
        with pytest.raises(KubeCallNotDeclared, match="delete leases.coordination.k8s.io"):
            await api.request_json("DELETE", "/apis/coordination.k8s.io/v1/namespaces/x/leases/l")
        with pytest.raises(KubeCallNotDeclared, match="delete_namespaced_pod"):
            await api.core.delete_namespaced_pod("train", "ml")
        with pytest.raises(KubeCallNotDeclared, match="list configmaps"):
            await api.request_json("GET", "/api/v1/namespaces/ml/configmaps")
        # Declared calls are sent (and fail here only because nothing listens).
        with pytest.raises(KubeUnavailable):
            await api.request_json("GET", "/api/v1/namespaces/gpu-watchdog/configmaps/gpu-watchdog-kill-switch")
        with pytest.raises(OSError):  # aiohttp's ClientConnectorError: a raw send is not translated here
            await api.send("GET", "/api/v1/pods", query={"watch": True}, timeout=1)
        with pytest.raises(KubeCallNotDeclared, match="get pods/log"):
            await api.send("GET", "/api/v1/namespaces/ml/pods/train/log")


def test_the_client_operations_listed_are_the_ones_production_code_calls():
    """A static read of watchdog/ (the test bed aside): every generated-client operation called is listed, and every
    listed one is called (a stale row would keep a grant alive in RBAC)."""
    called = set()
    for path in (ROOT / "watchdog").rglob("*.py"):
        if "testbed" not in path.parts:
            called |= {operation.removesuffix("_without_preload_content").removesuffix("_with_http_info")
                       for operation in CALL.findall(path.read_text())}
    assert called == set(CLIENT_OPERATIONS)
