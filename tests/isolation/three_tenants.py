"""The fixture cluster of the isolation audit's acceptance tests: three tenants on two GPU nodes.

- team-a is well isolated: its own MIG node (tainted, reserved for it), GPU and storage quotas, a LimitRange, a
  default-deny NetworkPolicy both ways, a PriorityClass;
- team-b has no ResourceQuota and no NetworkPolicy, and runs on the time-sliced node;
- team-c is configured well but shares the time-sliced A100 with team-b.
Labels are those GPU Feature Discovery writes (NVIDIA k8s-device-plugin README, "Generated Labels").
"""

from __future__ import annotations

from watchdog.testbed.cluster.apiserver import FakeApiServer

DRIVER = {"nvidia.com/cuda.driver-version.full": "550.54.15"}


def gpu_pod(namespace: str, name: str, *, node: str, resource: str, count: int, priority_class: str,
            toleration: str) -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {"nodeName": node, "priorityClassName": priority_class,
                 "tolerations": [{"key": toleration, "operator": "Exists", "effect": "NoSchedule"}],
                 "containers": [{"name": "main", "image": "cuda:12",
                                 "resources": {"limits": {resource: str(count)}}}]},
        "status": {"phase": "Running"},
    }


def quota(namespace: str, hard: dict[str, str]) -> dict:
    return {"metadata": {"name": "tenant-quota", "namespace": namespace}, "spec": {"hard": hard}}


def limit_range(namespace: str, resource: str, maximum: str) -> dict:
    return {"metadata": {"name": "gpu-limits", "namespace": namespace},
            "spec": {"limits": [{"type": "Container", "max": {resource: maximum}}]}}


def deny_all(namespace: str) -> dict:
    return {"metadata": {"name": "default-deny", "namespace": namespace},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}


def claim(namespace: str, name: str, size: str, storage_class: str | None = None) -> dict:
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def build_three_tenants(server: FakeApiServer) -> None:
    for name in ("team-a", "team-b", "team-c", "kube-system"):
        server.add_object("namespaces", {"metadata": {"name": name, "labels": {"gpu-tenant": "true"}},
                                         "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
    server.add_object("storageclasses", {"metadata": {"name": "standard", "annotations": {
        "storageclass.kubernetes.io/is-default-class": "true"}}, "provisioner": "csi.example.com"})
    server.add_object("storageclasses", {"metadata": {"name": "fast"}, "provisioner": "csi.example.com"})
    for name, value in (("gold", 1000), ("silver", 500), ("bronze", 100)):
        server.add_priority_class(name, value)
    server.add_node("gpu-mig", capacity={"nvidia.com/mig-1g.10gb": "7"},
                    taints=[{"key": "tenant", "value": "team-a", "effect": "NoSchedule"}],
                    labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/mig.strategy": "mixed",
                            "nvidia.com/mig.config": "all-1g.10gb", "gpu-watchdog.io/reserved-for": "team-a",
                            **DRIVER})
    server.add_node("gpu-ts", capacity={"nvidia.com/gpu": "4"},
                    taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                    labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-SHARED",
                            "nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4",
                            "nvidia.com/mig.strategy": "none", **DRIVER})
    server.add_node("cpu-1")

    server.add_pod(gpu_pod("team-a", "train", node="gpu-mig", resource="nvidia.com/mig-1g.10gb", count=2,
                           priority_class="gold", toleration="tenant"))
    server.add_object("resourcequotas", quota("team-a", {"requests.nvidia.com/mig-1g.10gb": "4",
                                                         "requests.storage": "100Gi"}))
    server.add_object("limitranges", limit_range("team-a", "nvidia.com/mig-1g.10gb", "2"))
    server.add_object("networkpolicies", deny_all("team-a"))
    server.add_object("persistentvolumeclaims", claim("team-a", "data", "50Gi", "fast"))

    server.add_pod(gpu_pod("team-b", "infer", node="gpu-ts", resource="nvidia.com/gpu", count=1,
                           priority_class="silver", toleration="nvidia.com/gpu"))
    server.add_object("limitranges", limit_range("team-b", "nvidia.com/gpu", "1"))
    server.add_object("persistentvolumeclaims", claim("team-b", "cache", "20Gi"))

    server.add_pod(gpu_pod("team-c", "batch", node="gpu-ts", resource="nvidia.com/gpu", count=1,
                           priority_class="bronze", toleration="nvidia.com/gpu"))
    server.add_object("resourcequotas", quota("team-c", {"requests.nvidia.com/gpu": "2", "requests.storage": "10Gi"}))
    server.add_object("limitranges", limit_range("team-c", "nvidia.com/gpu", "1"))
    server.add_object("networkpolicies", deny_all("team-c"))
    server.add_object("persistentvolumeclaims", claim("team-c", "scratch", "5Gi", "standard"))
