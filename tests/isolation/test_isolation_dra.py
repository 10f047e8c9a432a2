"""The audit on tenants that get GPUs through Dynamic Resource Allocation: their ResourceClaims need a quota on each
GPU device class they use (``<class>.deviceclass.resource.k8s.io/devices``), found and fixed like the extended-resource
quota. A fourth tenant, team-d, joins the three-tenant fake cluster with claims only."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
import yaml

from tests.isolation.conftest import audit_json
from tests.isolation.three_tenants import build_three_tenants
from watchdog.isolation import run_audit
from watchdog.model.cluster import ClusterObjects
from watchdog.testbed.cluster.apiserver import FakeApiServer

KUBECTL = Path(sys.executable).with_name("kubectl")
GPU_KEY = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"
MIG_KEY = "mig.nvidia.com.deviceclass.resource.k8s.io/devices"


def resource_claim(namespace: str, name: str, *requests: dict) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"devices": {"requests": list(requests)}}}


def exactly(name: str, device_class: str, count: int | None = None, **more) -> dict:
    body = {"deviceClassName": device_class, **more}
    if count is not None:
        body["count"] = count
    return {"name": name, "exactly": body}


TEAM_D_CLAIMS = [
    resource_claim("team-d", "trainer-gpus", exactly("gpus", "gpu.nvidia.com", 2)),
    # firstAvailable: either alternative may be allocated, so each class needs its cap.
    resource_claim("team-d", "notebook", {"name": "small", "firstAvailable": [
        {"name": "mig", "deviceClassName": "mig.nvidia.com"}, {"name": "gpu", "deviceClassName": "gpu.nvidia.com"}]}),
    # An IMEX channel of NVIDIA's ComputeDomain is not a GPU.
    resource_claim("team-d", "imex", exactly("channel", "compute-domain-default-channel.nvidia.com")),
]


def audit_rows(claims: list[dict], quotas: list[dict] = ()) -> dict:
    report = run_audit(ClusterObjects(objects={"namespaces": [{"metadata": {"name": "team-d"}}],
                                               "resourceclaims": claims, "resourcequotas": list(quotas)}))
    return report.of("team-d")["gpu-quota"]


def test_claims_without_a_device_class_quota_fail_and_the_fix_caps_each_class():
    row = audit_rows(TEAM_D_CLAIMS)
    assert (row.result, row.evidence) == ("fail", f"team-d: not capped: {GPU_KEY} (3 claimed), {MIG_KEY} (1 claimed)")
    assert row.fix["spec"]["hard"] == {GPU_KEY: "3", MIG_KEY: "1"}


def test_a_quota_on_every_class_used_passes_and_a_missing_class_still_fails():
    both = {"metadata": {"name": "q", "namespace": "team-d"}, "spec": {"hard": {GPU_KEY: "4", MIG_KEY: "1"}}}
    row = audit_rows(TEAM_D_CLAIMS, [both])
    assert (row.result, row.evidence) == (
        "pass", "team-d: gpu.nvidia.com devices 3 claimed of 4; mig.nvidia.com devices 1 claimed of 1")
    gpu_only = {"metadata": {"name": "q", "namespace": "team-d"}, "spec": {"hard": {GPU_KEY: "4"}}}
    row = audit_rows(TEAM_D_CLAIMS, [gpu_only])
    assert row.result == "fail" and row.fix["spec"]["hard"] == {MIG_KEY: "1"}


def test_v1beta1_claims_all_mode_and_a_bad_count_are_read_or_named():
    beta = resource_claim("team-d", "beta", {"name": "g", "deviceClassName": "h100.gpu.nvidia.com", "count": 2})
    every = resource_claim("team-d", "every", exactly("all", "mig.nvidia.com", allocationMode="All"))
    bad = resource_claim("team-d", "bad", exactly("g", "gpu.nvidia.com", count=0))
    row = audit_rows([beta, every, bad])
    assert row.result == "fail"
    assert "ResourceClaim team-d/bad: request g: count 0 is not a positive integer" in row.evidence
    assert "takes every mig.nvidia.com device it matches (allocationMode All)" in row.evidence
    assert row.fix["spec"]["hard"] == {"h100.gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "2", MIG_KEY: "0"}


def test_a_tenant_without_claims_or_gpu_pods_is_unchanged():
    row = audit_rows([TEAM_D_CLAIMS[2]])  # the IMEX channel only
    assert (row.result, row.evidence, row.fix) == ("pass", "team-d: no pod requests a GPU resource", None)


@pytest.fixture
def four_tenants(tmp_path: Path, server: FakeApiServer) -> FakeApiServer:
    build_three_tenants(server)
    server.add_object("namespaces", {"metadata": {"name": "team-d"}, "spec": {"finalizers": ["kubernetes"]},
                                     "status": {"phase": "Active"}})
    for claim in TEAM_D_CLAIMS:
        server.add_object("resourceclaims", claim)
    server.write_kubeconfig(tmp_path / "kubeconfig")
    return server


async def test_the_dra_tenant_is_found_through_the_api_and_kubectl_applies_its_fix(four_tenants, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    before = await audit_json(kubeconfig)
    tenants = {t["tenant"]: {c["check"]: c for c in t["checks"]} for t in before["tenants"]}
    assert tenants["team-d"]["gpu-quota"]["result"] == "fail"
    fix = tenants["team-d"]["gpu-quota"]["fix"]
    assert fix["metadata"] == {"name": "gpu-watchdog-gpu-quota", "namespace": "team-d"}
    # The other tenants' rows are those of the three-tenant table.
    assert tenants["team-b"]["gpu-quota"]["evidence"] == "team-b: not capped: nvidia.com/gpu (1 requested)"
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "KUBECONFIG": str(kubeconfig),
           "KUBECACHEDIR": str(tmp_path / "cache")}
    process = await asyncio.create_subprocess_exec(
        str(KUBECTL), "apply", "-f", "-", env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(process.communicate(yaml.safe_dump(fix).encode()), 60)
    assert process.returncode == 0, err.decode()
    after = await audit_json(kubeconfig)
    team_d = next({c["check"]: c for c in t["checks"]} for t in after["tenants"] if t["tenant"] == "team-d")
    assert (team_d["gpu-quota"]["result"], team_d["gpu-quota"]["evidence"]) == (
        "pass", "team-d: gpu.nvidia.com devices 3 claimed of 3; mig.nvidia.com devices 1 claimed of 1")


async def test_a_cluster_without_dra_is_no_error(cluster, tmp_path):
    cluster.fail_next(1000, status=404, path_prefix="/apis/resource.k8s.io/")
    report = await audit_json(tmp_path / "kubeconfig")
    assert report["errors"] == []
    rows = {(t["tenant"], c["check"]): c["result"] for t in report["tenants"] for c in t["checks"]}
    assert rows[("team-a", "gpu-quota")] == "pass" and rows[("team-b", "gpu-quota")] == "fail"
    asked = [path for _, path, _ in cluster.requests if path.startswith("/apis/resource.k8s.io/")]
    assert len(asked) == 1  # a 404 says the cluster has no DRA: not asked again for every namespace
