"""A real kubectl against the fake API server's KubeVirt resources: what a person debugging a vGPU host types."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.fake_api import FakeApi
from tests.testbed.cluster.test_kubectl import Kubectl
from watchdog.testbed.cluster.apiserver import FakeApiServer

VMI = """apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: vm-a, namespace: vms, labels: {kubevirt.io/nodeName: node-1}}
spec: {domain: {firmware: {uuid: 5b1c7a9e-0000-4000-8000-000000000001}}}
status:
  phase: Running
  nodeName: node-1
  interfaces: [{ipAddress: 10.0.0.7}]
  conditions: [{type: Ready, status: "True"}]
"""


@pytest.fixture
async def cluster(fake_api: FakeApi) -> FakeApiServer:
    fake = await fake_api.server(deletion_delay=0.2)
    fake.add_node("node-1")
    return fake


@pytest.fixture
def kubectl(cluster, tmp_path) -> Kubectl:
    return Kubectl(cluster.write_kubeconfig(tmp_path / "kubeconfig"), tmp_path)


async def test_get_vmi_shows_the_crd_columns(cluster, kubectl, tmp_path):
    manifest = tmp_path / "vmi.yaml"
    manifest.write_text(VMI)
    assert "virtualmachineinstance.kubevirt.io/vm-a created" in await kubectl.ok("create", "-f", str(manifest))
    rows = (await kubectl.ok("get", "vmi", "-A")).splitlines()
    assert rows[0].split() == ["NAMESPACE", "NAME", "AGE", "PHASE", "IP", "NODENAME", "READY"]
    cells = rows[1].split()
    assert cells[:2] == ["vms", "vm-a"] and cells[3:] == ["Running", "10.0.0.7", "node-1", "True"]
    on_node = json.loads(await kubectl.ok("get", "vmis", "-A", "-l", "kubevirt.io/nodeName=node-1", "-o", "json"))
    assert [v["spec"]["domain"]["firmware"]["uuid"] for v in on_node["items"]] == [
        "5b1c7a9e-0000-4000-8000-000000000001"]
    assert "vm-a" not in await kubectl.ok("get", "vmi", "-A", "-l", "kubevirt.io/nodeName=node-2")
    assert 'virtualmachineinstance.kubevirt.io "vm-a" deleted' in await kubectl.ok("delete", "vmi", "-n", "vms",
                                                                                    "vm-a")
    assert "vm-a" not in await kubectl.ok("get", "vmi", "-A")


async def test_watch_and_migrations(cluster, kubectl, tmp_path):
    process = await kubectl.start("get", "vmi", "-n", "vms", "-w", "--output-watch-events")
    try:
        await asyncio.sleep(1.5)
        manifest = tmp_path / "vmi.yaml"
        manifest.write_text(VMI)
        await kubectl.ok("create", "-f", str(manifest))
        line = await asyncio.wait_for(process.stdout.readline(), 20)
        while b"vm-a" not in line:
            line = await asyncio.wait_for(process.stdout.readline(), 20)
        assert line.split()[:2] == [b"ADDED", b"vm-a"]
    finally:
        process.kill()
        await process.wait()
    migration = tmp_path / "vmim.yaml"
    migration.write_text("apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstanceMigration\n"
                         "metadata: {name: move-a, namespace: vms}\nspec: {vmiName: vm-a}\n")
    await kubectl.ok("create", "-f", str(migration))
    rows = (await kubectl.ok("get", "vmim", "-n", "vms")).splitlines()
    assert rows[0].split() == ["NAME", "PHASE", "VMI"] and rows[1].split() == ["move-a", "vm-a"]
    wide = (await kubectl.ok("get", "vmi", "-n", "vms", "-o", "wide")).splitlines()
    assert wide[0].split()[-2:] == ["LIVE-MIGRATABLE", "PAUSED"]


@pytest.mark.parametrize("short", ["vmi", "vmis", "virtualmachineinstances.kubevirt.io"])
async def test_short_names_resolve(cluster, kubectl, short):
    assert "No resources found" in (await kubectl("get", short, "-A")).err
