"""Devices allocated through DRA: the kubelet's claim tuples over real gRPC, the slice cache, the pure resolution,
and the attributor's hold-back of a claimed device no slice names yet."""

from __future__ import annotations

from tests.attribution.stage_fakes import FixedKubelet, FixedProc
from watchdog.attribution.assignments import KubeletAssignments
from watchdog.attribution.join import attribute, resolve_claim_devices, unassigned_processes
from watchdog.attribution.kubelet import PodResourcesClient
from watchdog.attribution.pods import PodCache
from watchdog.attribution.slices import SliceCache
from watchdog.attribution.stage import NodeAttributor
from watchdog.model import (ClaimDevice, ClaimRef, DeviceAssignment, PodIndex, PodRef, ResourceSliceInfo,
                            SliceDevice)

DRIVER = "gpu.nvidia.com"


def claimed(device: str, pod: str, *, claim: str | None = None, namespace: str = "ml") -> ClaimDevice:
    return ClaimDevice(driver=DRIVER, pool="node-a", device=device, claim=ClaimRef(namespace, claim or f"{pod}-gpu"),
                       namespace=namespace, pod=pod, container="main")


def slice_of(*devices: tuple[str, str | None], name: str = "s", generation: int = 1) -> ResourceSliceInfo:
    return ResourceSliceInfo(name=name, driver=DRIVER, pool="node-a", generation=generation, devices=tuple(
        SliceDevice(DRIVER, "node-a", device, uuid=uuid, type="mig" if "mig" in device else "gpu")
        for device, uuid in devices))


async def test_list_returns_claim_tuples_of_the_configured_driver_only(kubelet, socket_path):
    kubelet.set_pods(
        [("ml", "plugin", [("main", "nvidia.com/gpu", ["GPU-p"])])],
        claims=[("ml", "train", "main", "ml", "train-gpu", DRIVER, "node-a", "gpu-0"),
                ("ml", "train", "main", "ml", "train-nic", "example.com/nic", "node-a", "nic-0"),
                ("ml", "plugin", "side", "ml", "shared", DRIVER, "node-a", "gpu-1-mig-19-0-1")],
    )
    client = PodResourcesClient(socket_path, timeout=2.0)
    refresher = KubeletAssignments(client)
    try:
        listed = await client.list_assignments()
        assert await refresher.refresh(0.0)
    finally:
        await client.close()
    assert listed == (
        DeviceAssignment("GPU-p", "nvidia.com/gpu", "ml", "plugin", "main"),
        ClaimDevice(DRIVER, "node-a", "gpu-1-mig-19-0-1", ClaimRef("ml", "shared"), "ml", "plugin", "side"),
        ClaimDevice(DRIVER, "node-a", "gpu-0", ClaimRef("ml", "train-gpu"), "ml", "train", "main"),
    )
    assert [a.device_id for a in refresher.assignments] == ["GPU-p"]
    assert len(refresher.claim_devices) == 2


def test_resolution_names_the_uuid_and_hands_back_what_no_slice_names():
    index = SliceCache([slice_of(("gpu-0", "GPU-0"), ("gpu-0-mig-19-0-1", None))]).index()
    resolved, unresolved = resolve_claim_devices(
        [claimed("gpu-0", "a"), claimed("gpu-0", "b", claim="a-gpu"), claimed("gpu-0-mig-19-0-1", "c"),
         claimed("gpu-9", "d")], index)
    assert [(a.device_id, a.pod, a.claim, a.resource) for a in resolved] == [
        ("GPU-0", "a", ClaimRef("ml", "a-gpu"), "gpu.nvidia.com/gpu"),
        ("GPU-0", "b", ClaimRef("ml", "a-gpu"), "gpu.nvidia.com/gpu")]
    assert [c.pod for c in unresolved] == ["c", "d"]  # no UUID yet; no slice entry at all


def test_a_shared_claim_gives_the_device_several_owners_with_the_claim(make_pod, gpu_sample):
    a, b = make_pod("a"), make_pod("b")
    resolved, _ = resolve_claim_devices([claimed("gpu-0", "a", claim="team"), claimed("gpu-0", "b", claim="team")],
                                        SliceCache([slice_of(("gpu-0", "GPU-0"))]).index())
    result = attribute(gpu_sample(("GPU-0", (1, 2))), assignments=resolved, index=PodIndex.of([a, b]),
                       proc={1: (a.uid, a.containers[0].container_id), 2: (b.uid, b.containers[0].container_id)},
                       kubelet_ok=True, api_ok=True)
    assert result.devices["GPU-0"] == (PodRef("ml", "a", a.uid, "main"), PodRef("ml", "b", b.uid, "main"))
    assert result.claims == {("GPU-0", "ml/a"): ClaimRef("ml", "team"), ("GPU-0", "ml/b"): ClaimRef("ml", "team")}
    assert unassigned_processes(gpu_sample(("GPU-0", (1, 2))), result) == {}


def test_slice_cache_follows_events_and_keeps_only_the_newest_pool_generation():
    cache = SliceCache()
    assert not cache.synced and cache.index() == {}
    cache.replace([slice_of(("gpu-0", "GPU-0"), name="old", generation=1)])
    first = cache.index()
    assert cache.synced and first[(DRIVER, "node-a", "gpu-0")].uuid == "GPU-0" and cache.index() is first
    cache.apply("ADDED", slice_of(("gpu-0", "GPU-0"), ("gpu-0-mig-19-0-1", "MIG-new"), name="new", generation=2))
    assert set(cache.index()) == {(DRIVER, "node-a", "gpu-0"), (DRIVER, "node-a", "gpu-0-mig-19-0-1")}
    cache.apply("MODIFIED", slice_of(("gpu-0", "GPU-0"), name="new", generation=3))  # MIG device deleted
    assert set(cache.index()) == {(DRIVER, "node-a", "gpu-0")}  # the stale generation-1 slice does not count
    cache.apply("DELETED", slice_of(name="new", generation=3))
    assert set(cache.index()) == {(DRIVER, "node-a", "gpu-0")} and cache.generations() == {"old": 1}


def test_a_mig_device_advertised_without_uuid_resolves_to_the_one_mig_device_of_its_shape(mig_sample):
    abstract = SliceDevice(DRIVER, "node-a", "gpu-0-mig-19-2-1", parent_uuid="GPU-mig0", profile="1g.18gb", type="mig")
    named = SliceDevice(DRIVER, "node-a", "gpu-0-mig-19-0-1", uuid="MIG-a", parent_uuid="GPU-mig0", profile="1g.18gb")
    index = {abstract.slice_key: abstract, named.slice_key: named}
    wants = [claimed("gpu-0-mig-19-2-1", "notebook"), claimed("gpu-0-mig-19-2-1", "helper", claim="notebook-gpu")]
    # MIG-a is named by the slice, MIG-p is the device plugin's: MIG-new is the only 1g.18gb left on GPU-mig0.
    sample = mig_sample(("MIG-a", ()), ("MIG-p", ()), ("MIG-new", (7,)))
    resolved, unresolved = resolve_claim_devices(wants, index, sample=sample, taken=["MIG-p"])
    assert [(a.device_id, a.pod) for a in resolved] == [("MIG-new", "notebook"), ("MIG-new", "helper")]
    assert unresolved == ()
    # Two unnamed devices of that shape: which one is the claim's cannot be told, so it is held back.
    resolved, unresolved = resolve_claim_devices(wants, index, sample=sample)
    assert resolved == () and len(unresolved) == 2
    # Without the sample (or before the device exists) nothing is guessed.
    assert resolve_claim_devices(wants, index)[0] == ()


def test_a_claimed_device_without_a_slice_entry_is_held_back_then_attributed(make_pod, mig_sample, clock):
    notebook = make_pod("notebook")
    cache = SliceCache()
    cache.replace([slice_of(("gpu-0-mig-19-0-1", None))])  # the driver created it; its UUID is not published yet
    kubelet = FixedKubelet(claim_devices=[claimed("gpu-0-mig-19-0-1", "notebook")])
    attributor = NodeAttributor(kubelet=kubelet, pods=PodCache([notebook]), pods_ok=lambda: True, clock=clock,
                                proc=FixedProc({7: (notebook.uid, notebook.containers[0].container_id)}), slices=cache)
    sample = mig_sample(("MIG-new", (7,)))
    attributor.attribute(sample, tenant_label=None)
    kubelet.listed_at = clock.advance(5)  # a List after the process was first seen still names no UUID for it
    clock.advance(5)
    held = attributor.attribute(sample, tenant_label=None)
    assert held.healthy and held.processes == {} and held.devices == {}
    assert unassigned_processes(sample, held) == {}  # nothing for detection to call unauthorized
    assert kubelet.unknown == []  # the busy device is explained by the pending claim: no extra List
    cache.apply("MODIFIED", slice_of(("gpu-0-mig-19-0-1", "MIG-new"), generation=2))
    attributed = attributor.attribute(sample, tenant_label=None)
    ref = PodRef("ml", "notebook", notebook.uid, "main")
    assert attributed.devices == {"MIG-new": (ref,)} and attributed.processes == {7: ref}
    assert attributed.claims == {("MIG-new", "ml/notebook"): ClaimRef("ml", "notebook-gpu")}


def test_a_process_on_a_device_no_claim_of_its_pod_allocated_is_unassigned(make_pod, mig_sample, clock):
    owner, intruder = make_pod("owner"), make_pod("intruder", namespace="batch")
    cache = SliceCache([slice_of(("gpu-0-mig-19-0-1", "MIG-a"), ("gpu-0-mig-19-1-1", "MIG-b"))])
    kubelet = FixedKubelet(claim_devices=[claimed("gpu-0-mig-19-0-1", "owner"),
                                          claimed("gpu-0-mig-19-1-1", "intruder", namespace="batch")])
    proc = FixedProc({1: (owner.uid, owner.containers[0].container_id),
                 2: (intruder.uid, intruder.containers[0].container_id)})
    attributor = NodeAttributor(kubelet=kubelet, pods=PodCache([owner, intruder]), pods_ok=lambda: True, clock=clock,
                                proc=proc, slices=cache)
    sample = mig_sample(("MIG-a", (1, 2)), ("MIG-b", ()))
    clock.advance(30)
    attributor.attribute(sample, tenant_label=None)  # first sight of the pair: held until a later List
    kubelet.listed_at = clock.advance(5)
    clock.advance(5)
    result = attributor.attribute(sample, tenant_label=None)
    assert unassigned_processes(sample, result) == {2: ("MIG-a", "batch/intruder")}
