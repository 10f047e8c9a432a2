"""`gpu-watchdog audit` against the demo's cluster, and an audit that finds no tenant at all.

The demo's world holds what a multi-tenant cluster holds (scenarios/demo.yaml, ``cluster:``), so the audit a
newcomer runs from the demo's banner has something to say: a tenant fenced in on every side, one with egress left
open on a shared time-sliced GPU, one without a per-container GPU limit, and one with nothing at all. An audit that
finds no tenant says so and exits 3 rather than passing in silence (README, "Isolation audit").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.isolation.conftest import audit_json, run_audit_cli
from watchdog.testbed.cluster.apiserver import FakeApiServer
from watchdog.testbed.world import SimulatedWorld

DEMO = Path(__file__).resolve().parents[2] / "scenarios" / "demo.yaml"


@pytest.fixture
async def demo(tmp_path: Path):
    async with SimulatedWorld(DEMO, workdir=tmp_path / "world") as world:
        yield world, world.api.write_kubeconfig(tmp_path / "kubeconfig")


def results(report: dict) -> dict[tuple[str, str], dict]:
    return {(tenant["tenant"], check["check"]): check for tenant in report["tenants"] for check in tenant["checks"]}


async def test_the_demo_cluster_passes_warns_and_fails_with_fixes(demo):
    world, kubeconfig = demo
    report = await audit_json(kubeconfig, "--namespace-selector", "tenant")
    assert report["exit"] == 1 and report["errors"] == []
    assert [t["tenant"] for t in report["tenants"]] == ["analytics", "batch", "ml-prod", "ml-research"]
    checks = results(report)
    assert {checks[("ml-prod", name)]["result"] for name in ("gpu-quota", "gpu-limit-range", "node-pool",
                                                             "sharing-mode", "default-deny", "storage-quota",
                                                             "priority", "driver-version")} == {"pass"}
    assert "gpu.nvidia.com devices 1 claimed of 1" in checks[("ml-prod", "gpu-quota")]["evidence"]  # its DRA claim
    assert checks[("ml-research", "default-deny")]["result"] == "warn"  # ingress denied, egress open
    assert checks[("ml-research", "sharing-mode")]["result"] == "warn"  # the time-sliced A100
    assert checks[("analytics", "gpu-limit-range")]["result"] == "fail"
    for name, kind in (("gpu-quota", "ResourceQuota"), ("gpu-limit-range", "LimitRange"),
                       ("default-deny", "NetworkPolicy"), ("storage-quota", "ResourceQuota")):
        assert checks[("batch", name)]["result"] == "fail"
        assert checks[("batch", name)]["fix"]["kind"] == kind and checks[("batch", name)]["fix"]["metadata"][
            "namespace"] == "batch"
    assert "StorageClass shared-nfs shared with ml-prod, ml-research" in checks[("batch", "storage-quota")]["evidence"]
    # GPU Feature Discovery's labels and the node's taint, as the world sets them from the scenario.
    assert checks[("batch", "driver-version")]["evidence"] == "pool NVIDIA-H100-80GB-HBM3: driver 580.82.07"
    assert checks[("batch", "node-pool")]["result"] == "pass"


async def test_without_a_selector_every_namespace_but_kube_ones_is_a_tenant(demo):
    world, kubeconfig = demo
    report = await audit_json(kubeconfig)
    assert [t["tenant"] for t in report["tenants"]] == ["analytics", "batch", "default", "gpu-watchdog", "ml-prod",
                                                        "ml-research"]


async def test_an_audit_of_no_tenant_says_so_and_exits_3(demo):
    world, kubeconfig = demo
    code, out, err = await run_audit_cli("--kubeconfig", str(kubeconfig), "--namespace-selector", "team=none")
    assert code == 3
    assert out == "No tenants audited.\n"
    assert err == ("gpu-watchdog audit: nothing audited: no tenant namespace matches --namespace-selector 'team=none' "
                   "(kube-system, kube-public and kube-node-lease are never tenants)\n")
    report = await audit_json(kubeconfig, "--namespace-selector", "team=none")
    assert (report["exit"], report["tenants"], report["errors"]) == (3, [], [])


async def test_a_cluster_with_only_system_namespaces_has_no_tenant(server: FakeApiServer, tmp_path):
    server.add_object("namespaces", {"metadata": {"name": "kube-system"}})
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    code, out, err = await run_audit_cli("--kubeconfig", str(kubeconfig))
    assert (code, out) == (3, "No tenants audited.\n")
    assert "no tenant namespace exists" in err
