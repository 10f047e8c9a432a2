"""The pure checks on hand-built objects: the cases the three-tenant cluster does not reach."""

from __future__ import annotations

from decimal import Decimal

import pytest

from watchdog.isolation import AuditSettings, run_audit
from watchdog.isolation.quantity import QuantityError, format_quantity, parse_quantity
from watchdog.model.cluster import ClusterObjects, ReadError


def ns(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


def node(name: str, taints: tuple = (), **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}, "spec": {"taints": list(taints)}}


def pod(namespace: str, name: str, node_name: str, resources: dict, *, priority: int | None = None,
        priority_class: str = "", **spec) -> dict:
    body = {"nodeName": node_name, "containers": [{"name": "c", "resources": {"limits": resources}}], **spec}
    if priority is not None:
        body["priority"] = priority
    if priority_class:
        body["priorityClassName"] = priority_class
    return {"metadata": {"name": name, "namespace": namespace}, "spec": body, "status": {"phase": "Running"}}


def audit(**kinds) -> dict[tuple[str, str], tuple[str, str]]:
    errors = kinds.pop("errors", [])
    settings = kinds.pop("settings", AuditSettings())
    report = run_audit(ClusterObjects(objects=kinds, errors=errors), settings)
    return {(r.tenant, r.check): (r.result, r.evidence) for r in report.results}


TS = {"nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.replicas": "2", "nvidia.com/gpu.product": "L40S"}


def test_quantities():
    assert parse_quantity("10Gi") == 10 * 2**30 and parse_quantity("500m") == Decimal("0.5")
    assert parse_quantity(4) == 4 and parse_quantity("1e3") == 1000
    assert (format_quantity(Decimal(20 * 2**30)), format_quantity(Decimal("0.5"))) == ("20Gi", "0.5")
    for bad in ("four", "", "1.2.3", None, True, "5 Gi"):
        with pytest.raises(QuantityError):
            parse_quantity(bad)


def test_a_limits_only_gpu_quota_is_warned_and_its_fix_caps_requests():
    quota = {"metadata": {"name": "q", "namespace": "t"}, "spec": {"hard": {"limits.nvidia.com/gpu": "2"}}}
    report = run_audit(ClusterObjects(objects={
        "namespaces": [ns("t")], "resourcequotas": [quota],
        "pods": [pod("t", "p", "n1", {"nvidia.com/gpu": "1"})]}))
    result = report.of("t")["gpu-quota"]
    assert (result.result, result.evidence) == ("warn", "t: not capped: nvidia.com/gpu (1 requested); t: "
                                                "limits.nvidia.com/gpu is not enforced for an extended resource; "
                                                "cap requests.nvidia.com/gpu")
    assert result.fix["spec"]["hard"] == {"requests.nvidia.com/gpu": "1"}


def test_mps_neighbours_equal_priority_unbound_pods_and_reserved_nodes():
    results = audit(
        namespaces=[ns("x"), ns("y")],
        nodes=[node("n1", **TS, **{"gpu-watchdog.io/reserved-for": "y"})],
        pods=[pod("x", "a", "n1", {"nvidia.com/gpu": "1"}, priority=10),
              pod("y", "b", "n1", {"nvidia.com/gpu": "1"}, priority=10, priority_class="p10",
                  nodeSelector={"pool": "gpu"})])
    assert results[("x", "sharing-mode")] == (
        "warn", "n1 (L40S): mps x2, no memory or fault isolation, shared with y")
    assert results[("x", "node-pool")] == (
        "fail", "on nodes reserved for another tenant: x/a on n1 (reserved for y); no toleration for the node's "
                "taint, nodeSelector or required node affinity: x/a")
    assert results[("y", "node-pool")][0] == "pass"
    assert results[("x", "priority")] == (
        "warn", "no PriorityClass: x/a; same priority 10 as y on n1: neither can be evicted for the other")
    assert results[("y", "priority")] == ("warn", "same priority 10 as x on n1: neither can be evicted for the other")


def test_mig_neighbours_rdma_and_driver_versions_per_pool():
    mig = {"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.product": "H100"}
    results = audit(
        namespaces=[ns("x"), ns("y")],
        nodes=[node("n1", **mig, **{"nvidia.com/cuda.driver.major": "550", "nvidia.com/cuda.driver.minor": "54",
                                    "nvidia.com/cuda.driver.rev": "15"}),
               node("n2", **mig, **{"nvidia.com/cuda.driver-version.full": "535.104.05"})],
        pods=[pod("x", "a", "n1", {"nvidia.com/mig-3g.40gb": "1", "rdma/hca_shared_devices_a": "1"}),
              pod("y", "b", "n1", {"nvidia.com/mig-3g.40gb": "1", "rdma/hca_shared_devices_a": "1",
                                   "intel.com/sriov_netdevice": "1"})])
    assert results[("x", "mig-power")] == (
        "info", "n1: MIG instances next to y's (one board's power, cooling and PCIe)")
    assert results[("x", "rdma-sriov")] == ("info", "rdma/hca_shared_devices_a on n1: shared device, also used by y")
    assert results[("y", "rdma-sriov")] == (
        "info", "intel.com/sriov_netdevice on n1: dedicated virtual functions; rdma/hca_shared_devices_a on n1: "
                "shared device, also used by x")
    assert results[("x", "driver-version")] == ("fail", "pool H100: 535.104.05 on n2; 550.54.15 on n1")
    assert results[("x", "sharing-mode")] == ("pass", "n1 (H100): mig")


def test_limit_range_default_on_a_gpu_is_warned():
    limit_range = {"metadata": {"name": "lr", "namespace": "t"}, "spec": {"limits": [
        {"type": "Container", "max": {"nvidia.com/gpu": "2"}, "default": {"nvidia.com/gpu": "1"}}]}}
    results = audit(namespaces=[ns("t")], limitranges=[limit_range],
                    pods=[pod("t", "p", "n", {"nvidia.com/gpu": "1"})])
    assert results[("t", "gpu-limit-range")] == (
        "warn", "t: max per container nvidia.com/gpu 2; t: a default for nvidia.com/gpu is given to every container "
                "without a limit, CPU-only ones too")


def test_ingress_only_deny_is_warned_and_tenants_group_by_label():
    policy = {"metadata": {"name": "deny-in", "namespace": "t1"}, "spec": {"podSelector": {}}}
    report = run_audit(ClusterObjects(objects={
        "namespaces": [ns("t2", team="blue"), ns("t1", team="blue"), ns("kube-system")],
        "networkpolicies": [policy]}), AuditSettings(tenant_label="team"))
    assert [(r.evidence, r.result) for r in report.results if r.check == "default-deny"] == [
        ("t1: ingress denied by deny-in; egress open", "warn"), ("t2: no default-deny ingress policy", "fail")]
    assert report.scorecard()[("blue", "default-deny")] == "fail"  # the worst namespace is the tenant's result
    assert set(report.namespaces) == {"blue"} and report.namespaces["blue"] == ("t1", "t2")


def test_an_unreadable_kind_and_an_unforeseen_shape_are_reported_and_the_rest_runs():
    objects = {"namespaces": [ns("t")], "pods": [{"metadata": {"name": "p", "namespace": "t"}, "spec": "garbage"}],
               "limitranges": [{"metadata": {"name": "lr", "namespace": "t"}, "spec": {"limits": "garbage"}}]}
    report = run_audit(ClusterObjects(objects=objects, errors=[ReadError("networkpolicies", "t", "403: forbidden")]))
    assert report.errors == ["pod t/p: unexpected object shape: 'str' object has no attribute 'get'"]
    results = {r.check: (r.result, r.evidence) for r in report.results}
    assert results["default-deny"] == ("error", "cannot list networkpolicies in namespace t: 403: forbidden")
    assert results["gpu-limit-range"] == ("error", "unexpected object shape: AttributeError: 'str' object has no "
                                                   "attribute 'get'")
    assert results["gpu-quota"] == ("pass", "t: no pod requests a GPU resource")


def test_the_agents_attribution_tells_mig_neighbours_on_one_board_from_those_on_another():
    mig = {"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.product": "H100"}
    objects = {"namespaces": [ns("x"), ns("y"), ns("z")], "nodes": [node("n1", **mig)],
               "pods": [pod(t, "p", "n1", {"nvidia.com/mig-3g.40gb": "1"}) for t in ("x", "y", "z")]}
    node_level = run_audit(ClusterObjects(objects=objects)).of("x")["mig-power"]
    assert (node_level.result, node_level.evidence) == (
        "info", "n1: MIG instances next to y, z's (one board's power, cooling and PCIe)")
    users = {("n1", "GPU-0"): frozenset({"x", "y"}), ("n1", "GPU-1"): frozenset({"z"})}
    per_gpu = run_audit(ClusterObjects(objects=objects, gpu_users=users))
    assert per_gpu.of("x")["mig-power"].evidence == "n1 GPU-0: MIG instances next to y's (one board's power, " \
                                                    "cooling and PCIe)"
    assert per_gpu.of("z")["mig-power"].result == "pass"
