"""The fake API server answers a virt-launcher pod's eviction as KubeVirt's webhook does, then migrates the VM as
its evacuation controller does: over real HTTP, through the agent's own eviction client."""

from __future__ import annotations

import pytest

from watchdog.kube.eviction import KubeEvictions
from watchdog.model import EvictionResult as R
from watchdog.model import PodRef
from watchdog.testbed.cluster.apiserver_store import KUBEVIRTS, PODS, VMI_MIGRATIONS, VMIS

WEBHOOK = 'admission webhook "virt-launcher-eviction-interceptor.kubevirt.io" denied the request: '


def add_vm(server, name: str = "vm-a", *, strategy: str | None = "LiveMigrate", migratable: bool = True,
           vmi_node: str = "node-1", annotate: bool = True) -> PodRef:
    spec: dict = {"domain": {"devices": {"gpus": [{"name": "g", "deviceName": "nvidia.com/GRID_A100_4C"}]}}}
    if strategy:
        spec["evictionStrategy"] = strategy
    vmi = server.store.create(VMIS, {
        "metadata": {"name": name, "namespace": "vms", "labels": {"kubevirt.io/nodeName": vmi_node}}, "spec": spec,
        "status": {"phase": "Running", "nodeName": vmi_node,
                   "conditions": [{"type": "LiveMigratable", "status": "True" if migratable else "False"}]}})
    pod = server.add_pod(namespace="vms", name=f"virt-launcher-{name}-abcde", node="node-1", owner_kind=None,
                         labels={"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": vmi["metadata"]["uid"]},
                         annotations={"kubevirt.io/domain": name} if annotate else {})
    return PodRef("vms", pod["metadata"]["name"], pod["metadata"]["uid"])


@pytest.fixture
def kube(server, api) -> KubeEvictions:
    server.add_node("node-1")
    server.add_node("node-2")
    return KubeEvictions(api)


def vmi(server, name: str = "vm-a") -> dict:
    return server.store.get(VMIS, "vms", name)


async def test_live_migrate_marks_the_vmi_and_the_evacuation_moves_the_vm(server, kube):
    ref = add_vm(server)
    reply = await kube.evict(ref, dry_run=False)
    assert reply.result is R.MIGRATING and reply.http_status == 429
    assert vmi(server)["status"]["evacuationNodeName"] == "node-1"
    assert server.get_pod("vms", ref.name)["status"]["phase"] == "Running"  # the eviction itself was refused
    (vmim,) = server.store.list(VMI_MIGRATIONS, "vms")
    assert vmim["metadata"]["name"].startswith("kubevirt-evacuation-")
    assert (vmim["metadata"]["labels"], vmim["spec"], vmim["status"]["phase"]) == (
        {"kubevirt.io/vmi-name": "vm-a"}, {"vmiName": "vm-a"}, "Pending")
    again = await kube.evict(ref, dry_run=False)
    assert again.result is R.MIGRATING and "Evacuation in progress" in again.message
    moved = []
    server.evacuations.on_migrated.append(lambda *args: moved.append(args))
    server.evacuations.advance()
    state = vmi(server)["status"]["migrationState"]
    assert state["startTimestamp"] and "endTimestamp" not in state and state["targetNode"] == "node-2"
    assert server.evacuations.finish() == 1
    after = vmi(server)
    assert (after["status"]["nodeName"], after["metadata"]["labels"]["kubevirt.io/nodeName"]) == ("node-2", "node-2")
    assert after["status"]["migrationState"]["completed"] and "evacuationNodeName" not in after["status"]
    assert server.store.get(VMI_MIGRATIONS, "vms", vmim["metadata"]["name"])["status"]["phase"] == "Succeeded"
    pods = {p["metadata"]["name"]: p for p in server.store.list(PODS, "vms")}
    assert pods[ref.name]["status"]["phase"] == "Succeeded"
    (target,) = [p for name, p in pods.items() if name != ref.name]
    assert target["spec"]["nodeName"] == "node-2" and target["status"]["phase"] == "Running"
    assert moved == [("vms", "vm-a", "node-1", "node-2")]
    # The pod now on node-2 is the target: an eviction of it (say, by node-1's stale view) is refused.
    target_ref = PodRef("vms", target["metadata"]["name"])
    server.store.update(VMIS, {**after, "status": {**after["status"], "nodeName": "node-3"}})
    refused = await kube.evict(target_ref, dry_run=False)
    assert refused.result is R.BLOCKED and refused.message == "refused by KubeVirt: Eviction request for target Pod"


async def test_a_dry_run_answers_the_same_and_marks_nothing(server, kube):
    ref = add_vm(server)
    reply = await kube.evict(ref, dry_run=True)
    assert reply.result is R.DRY_RUN and reply.message.startswith("would live-migrate VMI vms/vm-a")
    assert "evacuationNodeName" not in vmi(server)["status"] and not server.store.list(VMI_MIGRATIONS)


async def test_not_live_migratable_is_refused_with_kubevirts_reason(server, kube):
    ref = add_vm(server, migratable=False)
    reply = await kube.evict(ref, dry_run=False)
    assert reply.result is R.BLOCKED
    assert reply.message == ("refused by KubeVirt: VMI vm-a is configured with an eviction strategy but is not "
                             "live-migratable")
    assert not server.store.list(VMI_MIGRATIONS)


@pytest.mark.parametrize("strategy,migratable", [("None", True), (None, True), ("LiveMigrateIfPossible", False)])
async def test_without_migration_the_pod_is_evicted_and_the_vm_stops(server, kube, strategy, migratable):
    ref = add_vm(server, strategy=strategy, migratable=migratable)
    reply = await kube.evict(ref, dry_run=False)
    assert reply.result is R.EVICTED and not server.store.list(VMI_MIGRATIONS)


async def test_the_cluster_default_strategy_applies_to_a_vmi_without_one(server, kube):
    server.store.create(KUBEVIRTS, {"metadata": {"name": "kubevirt", "namespace": "kubevirt"},
                                    "spec": {"configuration": {"evictionStrategy": "LiveMigrate"}}})
    ref = add_vm(server, strategy=None)
    assert (await kube.evict(ref, dry_run=False)).result is R.MIGRATING


async def test_a_missing_vmi_and_an_unannotated_pod(server, kube):
    ref = add_vm(server)
    server.store.remove(VMIS, "vms", "vm-a")
    reply = await kube.evict(ref, dry_run=False)
    assert reply.result is R.BLOCKED and "kubevirt failed getting the vmi" in reply.message
    plain = add_vm(server, "vm-b", annotate=False)  # the webhook finds no VMI name: it passes
    assert (await kube.evict(plain, dry_run=False)).result is R.EVICTED


async def test_the_wire_answer_is_the_webhooks_429(server, kube, api):
    ref = add_vm(server)
    response = await api.send("POST", f"/api/v1/namespaces/vms/pods/{ref.name}/eviction",
                              body={"apiVersion": "policy/v1", "kind": "Eviction",
                                    "metadata": {"name": ref.name, "namespace": "vms"}})
    body = await response.json()
    assert response.status == 429 and body["code"] == 429 and body["reason"] == "TooManyRequests"
    assert body["message"] == WEBHOOK + 'Eviction triggered evacuation of VMI "vms/vm-a"'


async def test_a_marked_vmi_answers_evacuation_in_progress_before_the_target_pod_check(server, kube):
    # pod-eviction-admitter.go admitLauncherPod: IsMarkedForEviction() is checked before
    # vmi.Status.NodeName != pod.Spec.NodeName ("Eviction request for target Pod").
    ref = add_vm(server, vmi_node="node-2")  # the pod on node-1 is not where the VMI runs
    marked = vmi(server)
    marked["status"]["evacuationNodeName"] = "node-2"
    server.store.update(VMIS, marked)
    reply = await kube.evict(ref, dry_run=False)
    assert reply.result is R.MIGRATING and "Evacuation in progress" in reply.message
