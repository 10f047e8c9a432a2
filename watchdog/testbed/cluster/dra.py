"""Dynamic Resource Allocation on the simulated node: the GPU driver's ResourceSlice and the pods' ResourceClaims.

On a DRA node (scenario ``dra:``) a pod with a ``claim`` gets its device from that ResourceClaim instead of the
device plugin (the other pods still use the plugin, as on a node running both for different GPUs): the fake
kubelet lists them under ``dynamic_resources`` and this module keeps the fake API server's ``resource.k8s.io/v1``
objects in step, tick by tick, the way NVIDIA's DRA driver and the scheduler would:

- one ResourceSlice per node for the driver, pool = node name, a device per whole GPU (``gpu-<index>``) and per MIG
  device (``gpu-<index>-mig-<giProfileId>-<start>-<size>``) with the attributes the driver publishes (``type``,
  ``uuid``, and for MIG ``parentUUID``, ``profile``: NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/deviceinfo.go),
  republished with a higher pool generation on every change (resource.k8s.io/v1 ResourcePool);
- a MIG device that appears (a claim asked for it: the scenario reconfigures the GPU) reaches the slice only
  ``slice_lag_ticks`` later, so the agent meets a claimed device that no slice names yet;
- a ResourceClaim per claim in use (allocated device, ``reservedFor`` its pods), deleted when its last pod ends.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import Any, Iterable, NamedTuple

from watchdog.model import SliceDevice, SliceKey
from watchdog.testbed.cluster.apiserver_store import RESOURCE_CLAIMS, RESOURCE_SLICES, Store
from watchdog.testbed.gpu_node import SimulatedGpuNode
from watchdog.testbed.scenario import Scenario


class DraDevice(NamedTuple):
    name: str
    uuid: str
    parent_uuid: str | None = None
    profile: str | None = None

    @property
    def type(self) -> str:
        return "mig" if self.profile else "gpu"


class ClaimUse(NamedTuple):
    """One running pod's container using one claimed device."""

    namespace: str
    pod: str
    pod_uid: str
    container: str
    claim: str  # ResourceClaim name, in the pod's namespace
    device: str  # DRA device name in the node's pool


def dra_devices(node: SimulatedGpuNode, tick: int) -> list[DraDevice]:
    """The driver's view of the node at ``tick``: whole GPUs, or the MIG devices that exist now."""
    devices = []
    for gpu, uuid in enumerate(node.gpu_uuids):
        layout = node.layout(gpu, tick)
        if not layout.mig_enabled:
            devices.append(DraDevice(f"gpu-{gpu}", uuid))
            continue
        for instance in layout.instances:
            profile = instance.profile
            devices.append(DraDevice(
                f"gpu-{gpu}-mig-{profile.profile_id}-{instance.slot}-{profile.compute_slices}", instance.uuid,
                parent_uuid=uuid, profile=profile.name))
    return devices


def claim_uses(scenario: Scenario, node: SimulatedGpuNode, tick: int, *, ended: Iterable[str] = ()) -> list[ClaimUse]:
    """Running pods' claimed devices by DRA device name (pods with a ``claim``; the others use the device plugin);
    pods in ``ended`` (evicted) and devices that do not exist at ``tick`` are left out, as the kubelet frees them."""
    names = {device.uuid: device.name for device in dra_devices(node, tick)}
    pods = {pod.key: pod for pod in scenario.pods}
    gone = set(ended)
    uses = []
    for row in node.assignments(tick):
        key = f"{row.namespace}/{row.pod}"
        device = names.get(row.device_id.partition("::")[0])
        pod = pods[key]
        if key in gone or device is None or pod.claim is None:
            continue
        uses.append(ClaimUse(row.namespace, row.pod, pod.uid or "", row.container, pod.claim, device))
    return uses


class SliceLag:
    """Which device UUIDs the driver has published by ``tick``: a MIG device reaches the slice ``lag`` ticks after
    it first exists; whole GPUs are there from the start."""

    def __init__(self, lag: int) -> None:
        self.lag = lag
        self._first_seen: dict[str, int] = {}
        self._started: int | None = None

    def published(self, tick: int, devices: Iterable[DraDevice]) -> set[str]:
        """UUIDs in the slice at ``tick``; the devices of the first call were there before the scenario began."""
        devices = list(devices)
        if self._started is None:
            self._started = tick
            self._first_seen = {device.uuid: tick - self.lag for device in devices}
        found = set()
        for device in devices:
            first = self._first_seen.setdefault(device.uuid, tick)
            if not device.profile or tick - first >= self.lag:
                found.add(device.uuid)
        return found


def slice_index(*, driver: str, pool: str, devices: Iterable[DraDevice],
                published: set[str]) -> dict[SliceKey, SliceDevice]:
    """What the agent's slice cache would hold (``attribution.slices``), built straight from the devices."""
    return {
        (driver, pool, d.name): SliceDevice(driver=driver, pool=pool, device=d.name, uuid=d.uuid,
                                            parent_uuid=d.parent_uuid, type=d.type, profile=d.profile)
        for d in devices if d.uuid in published
    }


def slice_object(*, node: str, driver: str, generation: int, devices: Iterable[DraDevice],
                 published_uuids: set[str]) -> dict[str, Any]:
    """A resource.k8s.io/v1 ResourceSlice as NVIDIA's driver publishes it, with the devices whose UUID is in
    ``published_uuids`` (a device not yet published is not in the slice at all)."""
    entries = []
    for device in devices:
        if device.uuid not in published_uuids:
            continue
        attributes: dict[str, dict[str, str]] = {"type": {"string": device.type}, "uuid": {"string": device.uuid}}
        if device.parent_uuid:
            attributes["parentUUID"] = {"string": device.parent_uuid}
        if device.profile:
            attributes["profile"] = {"string": device.profile}
        entries.append({"name": device.name, "attributes": attributes})
    return {
        "metadata": {"name": slice_name(node, driver)},
        "spec": {"driver": driver, "nodeName": node,
                 "pool": {"name": node, "generation": generation, "resourceSliceCount": 1}, "devices": entries},
    }


def slice_name(node: str, driver: str) -> str:
    return f"{node}-{driver.replace('.', '-')}"


def claim_object(*, namespace: str, name: str, driver: str, pool: str, device: str,
                 users: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """An allocated, reserved resource.k8s.io/v1 ResourceClaim; ``users`` are (pod name, pod UID)."""
    return {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": driver}}]}},
        "status": {
            "allocation": {"devices": {"results": [
                {"request": "gpu", "driver": driver, "pool": pool, "device": device}]}},
            "reservedFor": [{"resource": "pods", "name": pod, "uid": uid} for pod, uid in sorted(users)],
        },
    }


class DraPublisher:
    """Keeps the store's slice and claims equal to the node's devices and claim uses; writes only on change."""

    def __init__(self, store: Store, *, node: str, driver: str, slice_lag_ticks: int = 0) -> None:
        self.store = store
        self.node = node
        self.driver = driver
        self.lag = SliceLag(slice_lag_ticks)
        self.generation = 0
        self._slice_body: dict[str, Any] | None = None
        self._claims: dict[tuple[str, str], dict[str, Any]] = {}

    def sync(self, *, tick: int, devices: list[DraDevice], uses: list[ClaimUse]) -> None:
        self._sync_slice(devices, self.lag.published(tick, devices))
        self._sync_claims(uses)

    def _sync_slice(self, devices: list[DraDevice], published: set[str]) -> None:
        body = slice_object(node=self.node, driver=self.driver, generation=self.generation, devices=devices,
                            published_uuids=published)
        if body["spec"]["devices"] == (self._slice_body or {}).get("spec", {}).get("devices"):
            return
        self.generation += 1
        body["spec"]["pool"]["generation"] = self.generation
        name = body["metadata"]["name"]
        if self.store.get(RESOURCE_SLICES, "", name) is None:
            self.store.create(RESOURCE_SLICES, copy.deepcopy(body))
        else:
            current = self.store.get(RESOURCE_SLICES, "", name)
            current["spec"] = body["spec"]
            self.store.update(RESOURCE_SLICES, current)
        self._slice_body = body

    def _sync_claims(self, uses: list[ClaimUse]) -> None:
        by_claim: dict[tuple[str, str], list[ClaimUse]] = defaultdict(list)
        for use in uses:
            by_claim[(use.namespace, use.claim)].append(use)
        wanted = {
            key: claim_object(namespace=key[0], name=key[1], driver=self.driver, pool=self.node,
                              device=rows[0].device, users={(u.pod, u.pod_uid) for u in rows})
            for key, rows in by_claim.items()
        }
        for key in list(self._claims):
            if key not in wanted:
                if self.store.get(RESOURCE_CLAIMS, *key) is not None:
                    self.store.remove(RESOURCE_CLAIMS, *key)
                del self._claims[key]
        for key, body in wanted.items():
            if self._claims.get(key) == body:
                continue
            current = self.store.get(RESOURCE_CLAIMS, *key)
            if current is None:
                self.store.create(RESOURCE_CLAIMS, copy.deepcopy(body))
            else:
                current["spec"], current["status"] = body["spec"], body["status"]
                self.store.update(RESOURCE_CLAIMS, current)
            self._claims[key] = body
