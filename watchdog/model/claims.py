"""Devices handed out through Dynamic Resource Allocation (``resource.k8s.io/v1``), as attribution joins them.

A pod that gets its GPU from a ResourceClaim is not in the kubelet's PodResources ``devices`` list; the kubelet names
it under ``dynamic_resources`` as (claim, driver, pool, device) tuples (kubernetes
staging/src/k8s.io/kubelet/pkg/apis/podresources/v1/api.proto, ``DynamicResource``/``ClaimResource``). Which NVML
device that is, the driver publishes in its ResourceSlices as attributes of the device of that name. These types
carry the two halves; ``attribution.join.resolve_claim_devices`` joins them into ordinary ``DeviceAssignment``s.
"""

from __future__ import annotations

from dataclasses import dataclass

SliceKey = tuple[str, str, str]
"""(driver, pool, device): how a DRA device is named everywhere (ResourceClaim status, PodResources, slices)."""


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """The ResourceClaim a device came from."""

    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """One device of one claim, as PodResources List reports it for one container."""

    driver: str
    pool: str
    device: str
    claim: ClaimRef
    namespace: str  # the pod's
    pod: str
    container: str

    @property
    def slice_key(self) -> SliceKey:
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """One device of a driver's ResourceSlice, with the NVML identity the driver published for it.

    ``uuid`` is None for a device the driver advertises before it exists (a MIG device it creates only when a claim
    asks for it): such a device cannot be joined with NVML until a slice names its UUID.
    """

    driver: str
    pool: str
    device: str
    uuid: str | None = None
    parent_uuid: str | None = None
    type: str = ""  # "gpu", "mig", "vfio" (NVIDIA's DRA driver)
    profile: str | None = None  # MIG profile, e.g. "1g.18gb"

    @property
    def slice_key(self) -> SliceKey:
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class ResourceSliceInfo:
    """What the agent keeps of one ResourceSlice: its pool (with the pool generation, since a pool's slices are only
    consistent at the newest generation: resource.k8s.io/v1 ResourcePool) and its devices' identities."""

    name: str
    driver: str
    pool: str
    generation: int = 0
    devices: tuple[SliceDevice, ...] = ()
