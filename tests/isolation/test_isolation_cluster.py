"""`gpu-watchdog audit` against the fake API server: the three-tenant cluster, its fixes applied, and bad input.

The audit reads through the real ``kubernetes.aio`` client (kubeconfig written by the fake), and the fixes are
applied with a real ``kubectl apply``, so the objects it suggests are proven to be accepted by a client nobody here
wrote, and the re-run proves they satisfy the checks.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

import yaml

from tests.isolation.conftest import audit_json, run_audit_cli
from watchdog.isolation import CHECKS

KUBECTL = Path(sys.executable).with_name("kubectl")

EXPECTED_TABLE = """\
TENANT  CHECK            RESULT  EVIDENCE
team-a  gpu-quota        PASS    team-a: nvidia.com/mig-1g.10gb 2 requested of 4
team-a  gpu-limit-range  PASS    team-a: max per container nvidia.com/mig-1g.10gb 2
team-a  node-pool        PASS    1 GPU pod(s), all bound to their node pool
team-a  sharing-mode     PASS    gpu-mig (NVIDIA-H100-80GB-HBM3): mig
team-a  mig-power        PASS    no MIG instance next to another tenant's
team-a  default-deny     PASS    team-a: ingress denied by default-deny, egress by default-deny
team-a  storage-quota    PASS    team-a: storage capped (50Gi claimed)
team-a  rdma-sriov       PASS    no SR-IOV or RDMA resources requested
team-a  priority         PASS    PriorityClass values 1000
team-a  driver-version   PASS    pool NVIDIA-H100-80GB-HBM3: driver 550.54.15
team-a  vm-migration     PASS    no KubeVirt VM with a vGPU
team-b  gpu-quota        FAIL    team-b: not capped: nvidia.com/gpu (1 requested)
team-b  gpu-limit-range  PASS    team-b: max per container nvidia.com/gpu 1
team-b  node-pool        PASS    1 GPU pod(s), all bound to their node pool
team-b  sharing-mode     WARN    gpu-ts (NVIDIA-A100-SXM4-40GB-SHARED): time-slicing x4, no memory or fault isolation, \
shared with team-c
team-b  mig-power        PASS    no MIG instance next to another tenant's
team-b  default-deny     FAIL    team-b: no default-deny ingress policy
team-b  storage-quota    FAIL    team-b: no storage quota for standard (20Gi claimed); StorageClass standard shared \
with team-c
team-b  rdma-sriov       PASS    no SR-IOV or RDMA resources requested
team-b  priority         PASS    PriorityClass values 500
team-b  driver-version   PASS    pool NVIDIA-A100-SXM4-40GB-SHARED: driver 550.54.15
team-b  vm-migration     PASS    no KubeVirt VM with a vGPU
team-c  gpu-quota        PASS    team-c: nvidia.com/gpu 1 requested of 2
team-c  gpu-limit-range  PASS    team-c: max per container nvidia.com/gpu 1
team-c  node-pool        PASS    1 GPU pod(s), all bound to their node pool
team-c  sharing-mode     WARN    gpu-ts (NVIDIA-A100-SXM4-40GB-SHARED): time-slicing x4, no memory or fault isolation, \
shared with team-b
team-c  mig-power        PASS    no MIG instance next to another tenant's
team-c  default-deny     PASS    team-c: ingress denied by default-deny, egress by default-deny
team-c  storage-quota    PASS    team-c: storage capped (5Gi claimed); StorageClass standard shared with team-b
team-c  rdma-sriov       PASS    no SR-IOV or RDMA resources requested
team-c  priority         PASS    PriorityClass values 100
team-c  driver-version   PASS    pool NVIDIA-A100-SXM4-40GB-SHARED: driver 550.54.15
team-c  vm-migration     PASS    no KubeVirt VM with a vGPU

# Suggested fixes (kubectl apply -f -):
apiVersion: v1
kind: ResourceQuota
metadata:
  name: gpu-watchdog-gpu-quota
  namespace: team-b
spec:
  hard:
    requests.nvidia.com/gpu: '1'
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: gpu-watchdog-default-deny
  namespace: team-b
spec:
  podSelector: {}
  policyTypes:
  - Ingress
  - Egress
---
apiVersion: v1
kind: ResourceQuota
metadata:
  name: gpu-watchdog-storage-quota
  namespace: team-b
spec:
  hard:
    requests.storage: 20Gi
"""

B_FIXES = [
    {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu-watchdog-gpu-quota", "namespace": "team-b"},
     "spec": {"hard": {"requests.nvidia.com/gpu": "1"}}},
    {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
     "metadata": {"name": "gpu-watchdog-default-deny", "namespace": "team-b"},
     "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}},
    {"apiVersion": "v1", "kind": "ResourceQuota",
     "metadata": {"name": "gpu-watchdog-storage-quota", "namespace": "team-b"},
     "spec": {"hard": {"requests.storage": "20Gi"}}},
]


def table_rows(table: str) -> list[tuple[str, str, str, str]]:
    """(tenant, check, result, evidence) from EXPECTED_TABLE's rows, to compare the JSON with the same facts."""
    rows = []
    for line in table.split("\n\n")[0].splitlines()[1:]:
        tenant, check, result, evidence = line.split(None, 3)
        rows.append((tenant, check, result.lower(), evidence))
    return rows


async def test_three_tenants_give_exactly_the_expected_table(cluster, tmp_path):
    code, out, err = await run_audit_cli("--kubeconfig", str(tmp_path / "kubeconfig"))
    assert (code, err) == (1, "")  # something failed
    assert out == EXPECTED_TABLE


async def test_three_tenants_give_exactly_the_expected_json_and_yaml(cluster, tmp_path):
    report = await audit_json(tmp_path / "kubeconfig")
    fixes = iter(B_FIXES)
    expected_tenants = []
    for tenant, pods in (("team-a", 1), ("team-b", 1), ("team-c", 1)):
        checks = []
        for row_tenant, check, result, evidence in table_rows(EXPECTED_TABLE):
            if row_tenant == tenant:
                entry = {"check": check, "result": result, "evidence": evidence}
                if result == "fail":
                    entry["fix"] = next(fixes)
                checks.append(entry)
        expected_tenants.append({"tenant": tenant, "namespaces": [tenant], "gpuPods": pods, "checks": checks})
    assert report == {"exit": 1, "kind": "IsolationAudit", "tenants": expected_tenants, "errors": []}
    code, out, _ = await run_audit_cli("--kubeconfig", str(tmp_path / "kubeconfig"), "--output", "yaml")
    assert {"exit": code, **yaml.safe_load(out)} == report
    assert [c["check"] for c in expected_tenants[0]["checks"]] == list(CHECKS)


async def test_applying_the_suggested_fixes_with_kubectl_makes_those_checks_pass(cluster, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    before = await audit_json(kubeconfig)
    fixes = [c["fix"] for t in before["tenants"] for c in t["checks"] if "fix" in c]
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "KUBECONFIG": str(kubeconfig),
           "KUBECACHEDIR": str(tmp_path / "cache")}
    process = await asyncio.create_subprocess_exec(
        str(KUBECTL), "apply", "-f", "-", env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(yaml.safe_dump_all(fixes).encode()), 60)
    assert process.returncode == 0, err.decode()
    assert "resourcequota/gpu-watchdog-gpu-quota created" in out.decode()

    after = await audit_json(kubeconfig)
    team_b = {c["check"]: c for c in after["tenants"][1]["checks"]}
    assert {name: team_b[name]["result"] for name in ("gpu-quota", "default-deny", "storage-quota")} == {
        "gpu-quota": "pass", "default-deny": "pass", "storage-quota": "pass"}
    assert team_b["gpu-quota"]["evidence"] == "team-b: nvidia.com/gpu 1 requested of 1"
    assert not [c for t in after["tenants"] for c in t["checks"] if "fix" in c]
    assert after["exit"] == 0  # warnings (time-slicing) remain; nothing fails


async def test_an_unreachable_cluster_is_one_clear_line(tmp_path):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "x", "user": {}}], "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}]}))
    code, out, err = await run_audit_cli("--kubeconfig", str(kubeconfig))
    assert code == 2 and "Traceback" not in out + err
    assert out.splitlines()[-1].startswith("  cannot list namespaces: cannot reach the API server: ")
    code, out, err = await run_audit_cli("--kubeconfig", str(tmp_path / "missing"))
    assert code == 2 and err.startswith("gpu-watchdog audit: cannot load kubeconfig ") and "Traceback" not in err


async def test_a_namespace_the_identity_may_not_list_is_reported_and_the_rest_still_runs(cluster, tmp_path):
    cluster.fail_next(status=403, path_prefix="/apis/networking.k8s.io/v1/namespaces/team-c/networkpolicies")
    report = await audit_json(tmp_path / "kubeconfig")
    team_c = {c["check"]: c for c in report["tenants"][2]["checks"]}
    assert team_c["default-deny"] == {
        "check": "default-deny", "result": "error",
        "evidence": 'cannot list networkpolicies in namespace team-c: 403: networkpolicies is forbidden: User '
                    '"system:serviceaccount:gpu-watchdog:gpu-watchdog" cannot list resource "networkpolicies" in '
                    'API group "networking.k8s.io" in the namespace "team-c"'}
    assert team_c["gpu-quota"]["result"] == team_c["storage-quota"]["result"] == "pass"
    assert len(team_c) == len(CHECKS) and report["exit"] == 1


async def test_a_malformed_quota_value_is_named_and_the_other_checks_still_run(cluster, tmp_path):
    # A real API server refuses "four" at admission; objects written around it (or by older servers) can hold one.
    quota = cluster.store.get(cluster._resource("resourcequotas"), "team-c", "tenant-quota")
    quota["spec"]["hard"]["requests.nvidia.com/gpu"] = "four"
    cluster.store.update(cluster._resource("resourcequotas"), quota)
    report = await audit_json(tmp_path / "kubeconfig")
    team_c = {c["check"]: c for c in report["tenants"][2]["checks"]}
    assert team_c["gpu-quota"]["result"] == "fail"
    assert team_c["gpu-quota"]["evidence"] == (
        "ResourceQuota team-c/tenant-quota: spec.hard[requests.nvidia.com/gpu]: 'four' is not a quantity "
        "(expected a number with an optional unit, e.g. 4 or 10Gi); team-c: not capped: nvidia.com/gpu (1 requested)")
    assert team_c["storage-quota"] == {"check": "storage-quota", "result": "pass",
                                       "evidence": "team-c: storage capped (5Gi claimed); StorageClass standard "
                                                   "shared with team-b"}
    assert [c["result"] for c in report["tenants"][0]["checks"]] == ["pass"] * len(CHECKS)
