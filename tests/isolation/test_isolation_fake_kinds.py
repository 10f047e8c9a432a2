"""The fake API server serves the kinds the audit reads with a real server's list semantics, through the official
client's typed calls (not only the audit's raw reads): scope, label and field selectors, the list's
resourceVersion, 404 and 409 AlreadyExists."""

from __future__ import annotations

import pytest
from kubernetes.aio import client as k8s

from tests.isolation.three_tenants import build_three_tenants
from watchdog.kube.client import KubeApi
from watchdog.kube.errors import KubeConflict, KubeNotFound
from watchdog.testbed.cluster.apiserver import FakeApiServer


@pytest.fixture
def api(server: FakeApiServer, api: KubeApi) -> KubeApi:
    """The shared client, on a server holding the three tenants and one namespace that is no tenant."""
    build_three_tenants(server)
    server.add_object("namespaces", {"metadata": {"name": "other", "labels": {"gpu-tenant": "false"}}})
    return api


async def test_typed_lists_scope_and_selectors(api):
    core = api.core
    networking, storage = k8s.NetworkingV1Api(api.api_client), k8s.StorageV1Api(api.api_client)
    picked = await core.list_namespace(label_selector="gpu-tenant=true,kubernetes.io/metadata.name!=x")
    assert [n.metadata.name for n in picked.items] == ["kube-system", "team-a", "team-b", "team-c"]
    assert picked.metadata.resource_version.isdigit()
    assert [n.metadata.name for n in (await core.list_namespace(field_selector="metadata.name=other")).items] == [
        "other"]
    limit_ranges = await core.list_limit_range_for_all_namespaces()
    assert [(lr.metadata.namespace, lr.spec.limits[0].max) for lr in limit_ranges.items] == [
        ("team-a", {"nvidia.com/mig-1g.10gb": "2"}), ("team-b", {"nvidia.com/gpu": "1"}),
        ("team-c", {"nvidia.com/gpu": "1"})]
    policies = await networking.list_namespaced_network_policy("team-c")
    assert [(p.metadata.name, p.spec.policy_types) for p in policies.items] == [("default-deny", ["Ingress", "Egress"])]
    assert not (await networking.list_namespaced_network_policy("team-b")).items
    claims = await core.list_persistent_volume_claim_for_all_namespaces(field_selector="metadata.namespace=team-b")
    assert [c.spec.resources.requests["storage"] for c in claims.items] == ["20Gi"]
    classes = await storage.list_storage_class()
    assert [c.metadata.name for c in classes.items] == ["fast", "standard"]
    nodes = await core.list_node(label_selector="nvidia.com/gpu.sharing-strategy=time-slicing")
    assert [(n.metadata.name, n.spec.taints[0].key) for n in nodes.items] == [("gpu-ts", "nvidia.com/gpu")]


async def test_get_missing_and_duplicate_create(api):
    with pytest.raises(KubeNotFound, match='limitranges "nope" not found'):
        await api.request_json("GET", "/api/v1/namespaces/team-a/limitranges/nope")
    body = {"metadata": {"name": "default-deny"}, "spec": {"podSelector": {}}}
    with pytest.raises(KubeConflict, match='networkpolicies.networking.k8s.io "default-deny" already exists'):
        await api.request_json("POST", "/apis/networking.k8s.io/v1/namespaces/team-a/networkpolicies", body=body)
    created = await api.request_json("POST", "/apis/networking.k8s.io/v1/namespaces/team-b/networkpolicies",
                                     body=body)
    assert (created["kind"], created["metadata"]["namespace"]) == ("NetworkPolicy", "team-b")
