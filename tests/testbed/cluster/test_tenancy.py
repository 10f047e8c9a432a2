"""The cluster around the simulated node (scenario ``cluster:``): what the world puts in its API server, what a real
kubectl shows of it, and the quota status that follows the pods as a quota controller's would."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.testbed.cluster.test_kubectl import Kubectl
from watchdog.testbed.cluster.tenancy import SYSTEM_NAMESPACES
from watchdog.testbed.scenario import ScenarioError
from watchdog.testbed.world import SimulatedWorld

DEMO = Path(__file__).resolve().parents[3] / "scenarios" / "demo.yaml"
SMALL = {"name": "t", "gpus": [{"model": "A100-SXM4-40GB", "replicas": 2}],
         "pods": [{"namespace": "team-a", "name": "p", "device": {"gpu": 0}}]}


@pytest.fixture
async def demo(tmp_path: Path):
    async with SimulatedWorld(DEMO, workdir=tmp_path / "world") as world:
        yield world


async def test_kubectl_shows_the_tenancy_objects_as_a_cluster_prints_them(demo, tmp_path):
    kubectl = Kubectl(demo.api.write_kubeconfig(tmp_path / "kubeconfig"), tmp_path)
    namespaces = await kubectl.ok("get", "namespaces", "-l", "tenant")
    assert re.findall(r"^(\S+)\s+Active\s", namespaces, re.M) == ["analytics", "batch", "ml-prod", "ml-research"]
    quotas = await kubectl.ok("get", "resourcequota", "-n", "ml-prod")
    assert quotas.splitlines()[0].split() == ["NAME", "AGE", "REQUEST", "LIMIT"]
    assert ("gpu.nvidia.com.deviceclass.resource.k8s.io/devices: 1/1, requests.nvidia.com/mig-2g.20gb: 1/2, "
            "requests.nvidia.com/mig-4g.40gb: 1/1, shared-nfs.storageclass.storage.k8s.io/requests.storage: "
            "200Gi/500Gi") in quotas
    policies = await kubectl.ok("get", "networkpolicies", "-A")
    assert re.search(r"^ml-research\s+deny-ingress\s+<none>\s", policies, re.M)
    claims = await kubectl.ok("get", "pvc", "-n", "batch")
    assert re.search(r"^scratch\s+Bound\s+\S+\s+1Ti\s+RWX\s+shared-nfs\s", claims, re.M)
    classes = await kubectl.ok("get", "storageclasses")
    assert re.search(r"^standard \(default\)\s+rancher\.io/local-path\s+Delete\s+WaitForFirstConsumer\s+false",
                     classes, re.M)
    node = await kubectl.ok("get", "node", "sim-node-1", "-o", "jsonpath={.spec.taints[0].key} "
                            "{.metadata.labels.nvidia\\.com/gpu\\.product} {.status.addresses[0].address}")
    assert node == "nvidia.com/gpu NVIDIA-H100-80GB-HBM3 127.0.0.1"


async def test_namespaces_of_pods_system_and_agent_exist_labelled_by_name(tmp_path):
    async with SimulatedWorld(SMALL, workdir=tmp_path / "world") as world:
        names = {ns["metadata"]["name"]: ns for ns in world.api.objects("namespaces")}
    assert set(names) == {*SYSTEM_NAMESPACES, "gpu-watchdog", "team-a"}
    assert names["team-a"]["metadata"]["labels"] == {"kubernetes.io/metadata.name": "team-a"}
    assert names["team-a"]["status"] == {"phase": "Active"}


async def test_quota_usage_follows_the_pods(tmp_path):
    scenario = {**SMALL, "pods": [*SMALL["pods"], {"namespace": "team-a", "name": "late", "device": {"gpu": 0},
                                                     "start_tick": 2}],
                "cluster": {"objects": [{"apiVersion": "v1", "kind": "ResourceQuota",
                                         "metadata": {"name": "gpu", "namespace": "team-a"},
                                         "spec": {"hard": {"requests.nvidia.com/gpu": "4", "pods": "10",
                                                           "requests.storage": "1Ti"}}}]}}
    async with SimulatedWorld(scenario, workdir=tmp_path / "world") as world:

        def used() -> dict:
            return world.api.objects("resourcequotas", "team-a")[0]["status"]["used"]

        assert used() == {"requests.nvidia.com/gpu": "1", "pods": "1", "requests.storage": "0"}
        world.advance(1.0)
        world.advance(1.0)  # tick 2: the late pod starts
        assert used()["requests.nvidia.com/gpu"] == "2" and used()["pods"] == "2"
        version = world.api.objects("resourcequotas", "team-a")[0]["metadata"]["resourceVersion"]
        world.advance(1.0)  # nothing changed: the status is not rewritten
        assert world.api.objects("resourcequotas", "team-a")[0]["metadata"]["resourceVersion"] == version


async def test_a_kind_the_fake_does_not_serve_is_named(tmp_path):
    scenario = {**SMALL, "cluster": {"objects": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                                  "metadata": {"name": "d", "namespace": "team-a"}}]}}
    with pytest.raises(ScenarioError, match=r"cluster\.objects\.0: apps/v1 Deployment is not a kind the fake"):
        async with SimulatedWorld(scenario, workdir=tmp_path / "world"):
            pass


async def test_the_agent_pod_is_found_as_a_daemonset_pod(demo):
    pod = demo.add_agent_pod(port=4321)
    assert pod["metadata"]["namespace"] == "gpu-watchdog" and pod["metadata"]["name"].startswith("gpu-watchdog-")
    assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == "gpu-watchdog"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"
    assert pod["spec"]["nodeName"] == "sim-node-1" and pod["status"]["podIP"] == "127.0.0.1"
    assert pod["spec"]["containers"][0]["ports"][0] == {"name": "metrics", "containerPort": 4321, "protocol": "TCP"}
    assert pod["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
