"""pod_info: the facts detection and eviction decide on, read from API pods (dicts and V1Pod models)."""

from __future__ import annotations

import pytest
from kubernetes.aio import client as k8s

from watchdog.kube.pods import pod_info, strip_runtime_scheme
from watchdog.model import ContainerInfo


def api_pod(**overrides):
    pod = {
        "metadata": {"name": "train-0", "namespace": "ml", "uid": "u-1", "labels": {"tenant": "ml"},
                     "annotations": {"note": "x"}, "creationTimestamp": "2026-01-01T00:00:10Z",
                     "ownerReferences": [{"kind": "Job", "name": "j", "controller": False},
                                         {"kind": "StatefulSet", "name": "s", "controller": True}]},
        "spec": {"nodeName": "node-1", "priority": 1000, "priorityClassName": "batch",
                 "containers": [{"name": "main", "resources": {"requests": {"example.com/gpu-mem": "2048"}}},
                                {"name": "side", "resources": {"limits": {"example.com/gpu-mem": "1024"}}}],
                 "initContainers": [{"name": "init"}]},
        "status": {"phase": "Running", "qosClass": "Burstable",
                   "containerStatuses": [{"name": "main", "containerID": "containerd://abc"},
                                         {"name": "side", "containerID": "cri-o://def"}],
                   "initContainerStatuses": [{"name": "init", "containerID": "docker://123"}]},
    }
    for key, value in overrides.items():
        section, _, field = key.partition("__")
        pod[section][field] = value
    return pod


def test_reads_every_field():
    info = pod_info(api_pod(), gpu_memory_resource="example.com/gpu-mem")
    assert (info.uid, info.namespace, info.name, info.node) == ("u-1", "ml", "train-0", "node-1")
    assert dict(info.labels) == {"tenant": "ml"} and dict(info.annotations) == {"note": "x"}
    assert (info.priority, info.priority_class, info.qos_class) == (1000, "batch", "Burstable")
    assert (info.owner_kind, info.mirror, info.phase, info.deleting) == ("StatefulSet", False, "Running", False)
    assert info.created == 1767225610.0
    assert info.containers == (ContainerInfo("main", "abc"), ContainerInfo("side", "def"),
                               ContainerInfo("init", "123"))
    assert info.gpu_memory_request_bytes == 3072 * 1024 * 1024


def test_defaults_for_missing_fields():
    info = pod_info({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"priority": None}})
    assert (info.priority, info.priority_class, info.owner_kind, info.phase) == (0, "", None, "Pending")
    assert info.gpu_memory_request_bytes is None and info.containers == ()


def test_mirror_pod_is_owned_by_the_node():
    pod = api_pod(metadata__annotations={"kubernetes.io/config.mirror": "hash"}, metadata__ownerReferences=[])
    info = pod_info(pod)
    assert (info.mirror, info.owner_kind) == (True, "Node")


def test_deletion_timestamp_means_deleting():
    info = pod_info(api_pod(metadata__deletionTimestamp="2026-01-01T00:01:00Z"))
    assert info.deleting is True and info.live is False


def test_v1pod_model_is_accepted():
    model = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="m", namespace="ns", uid="u"),
                      spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="c")], node_name="n", priority=5),
                      status=k8s.V1PodStatus(phase="Running", container_statuses=[
                          k8s.V1ContainerStatus(name="c", container_id="containerd://x", image="i", image_id="",
                                                ready=True, restart_count=0)]))
    info = pod_info(model)
    assert (info.name, info.node, info.priority, info.containers) == ("m", "n", 5, (ContainerInfo("c", "x"),))


def test_bad_input_is_refused_clearly():
    with pytest.raises(ValueError, match="metadata.name"):
        pod_info({"metadata": {"namespace": "ns"}})
    with pytest.raises(TypeError, match="pod dict or a V1Pod"):
        pod_info(42)


def test_runtime_schemes_are_stripped():
    assert [strip_runtime_scheme(v) for v in ("containerd://a", "cri-o://b", "docker://c", "d", None, "")] == [
        "a", "b", "c", "d", None, None]


def test_gpu_resources_name_the_device_plugin_resources_requested():
    containers = [{"name": "a", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1", "cpu": "2"}}},
                  {"name": "b", "resources": {"requests": {"nvidia.com/gpu": "1", "example.com/gpu-mem": "5"}}}]
    info = pod_info(api_pod(spec__containers=containers))
    assert info.gpu_resources == ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb")
    assert pod_info(api_pod(spec__containers=[{"name": "c"}])).gpu_resources == ()


def test_the_last_applied_manifest_is_not_cached():
    annotations = {"kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 4000 + "}", "keep": "me"}
    pod = api_pod()
    pod["metadata"]["annotations"] = annotations
    assert dict(pod_info(pod).annotations) == {"keep": "me"}
