"""The kubelet PodResources v1 client: the one place (with the generated stubs) that speaks gRPC.

Everything above it sees ``DeviceAssignment`` tuples and a three-class error tree, never a grpc type, so the
refresh policy (``assignments.py``) is testable without a server and grpc stays replaceable. Facts relied on: the
unix socket and the ``/v1.PodResourcesLister/*`` paths (kubernetes
staging/src/k8s.io/kubelet/pkg/apis/podresources/v1/api.proto, ``package v1``), the server's 100 QPS/burst 10 rate
limit answered with RESOURCE_EXHAUSTED (kubernetes pkg/kubelet/apis/podresources/grpc/ratelimit.go), replicas of a
time-sliced/MPS device listed as ``<uuid>::<n>`` (NVIDIA k8s-device-plugin, internal/rm). Devices allocated through
Dynamic Resource Allocation come back as ``ClaimDevice`` (claim, driver, pool, device) tuples from
``ContainerResources.dynamic_resources``, for the configured DRA drivers only; their NVML identity is in the driver's
ResourceSlices, which ``attribution.join.resolve_claim_devices`` joins them with.
"""

from __future__ import annotations

import fnmatch
import logging
import os
from typing import Iterable, Sequence

import grpc

from watchdog.attribution.assignments import KubeletAssignments
from watchdog.attribution.proto import podresources_v1_pb2 as pb
from watchdog.attribution.proto import podresources_v1_pb2_grpc as pb_grpc
from watchdog.attribution.sharing import count_replicas, split_replica
from watchdog.attribution.sharing_sources import KubeletReplicas
from watchdog.config.attribution import AttributionSettings
from watchdog.model import ClaimDevice, ClaimRef, DeviceAssignment

log = logging.getLogger(__name__)

# nvidia.com/gpu.shared: the device plugin's sharing with renameByDefault: true renames a shared GPU's resource
# (k8s-device-plugin README, "Shared Access to GPUs"); nvidia.com/mig-* covers its MIG counterparts ("….shared").
DEFAULT_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*")
DEFAULT_DRA_DRIVERS = ("gpu.nvidia.com",)  # NVIDIA's DRA driver for GPUs (k8s-dra-driver-gpu, DriverName)
Listed = DeviceAssignment | ClaimDevice
# A List answer grows with pods × devices; Kubernetes' own podresources client helper accepts 16 MiB
# (pkg/kubelet/apis/podresources/client.go, defaultPodResourcesMaxSize) instead of gRPC's 4 MiB default; so do we.
_MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class KubeletError(Exception):
    """The PodResources API answered with an error, or something unexpected came back."""

    kind = "error"


class KubeletUnavailable(KubeletError):
    """No kubelet to talk to: the socket is absent, refuses connections, or the call timed out."""

    kind = "unavailable"


class KubeletRateLimited(KubeletError):
    """RESOURCE_EXHAUSTED "rejected by rate limit": the kubelet's 100 QPS / burst 10 limiter said no."""

    kind = "rate_limited"


class KubeletPodNotFound(KubeletError):
    """Get named a pod the kubelet does not know (it answers UNKNOWN "pod X in namespace Y not found")."""

    kind = "pod_not_found"


def resource_matches(resource: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(resource, pattern) for pattern in patterns)


class PodResourcesClient:
    """Async client for one kubelet socket; each call is one RPC with a deadline, errors mapped to ``KubeletError``.

    The channel is made on first use and dropped after UNAVAILABLE: a fresh channel connects at once, whereas a
    channel in TRANSIENT_FAILURE fails fast until gRPC's own reconnect backoff (up to 120 s) expires; the caller's
    backoff should be the only one.
    """

    def __init__(
        self, socket_path: str, *, timeout: float = 5.0, resources: Sequence[str] = DEFAULT_RESOURCES,
        dra_drivers: Sequence[str] = DEFAULT_DRA_DRIVERS,
    ) -> None:
        if not socket_path:
            raise ValueError("socket_path must name the kubelet's pod-resources unix socket")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.socket_path = socket_path
        self.timeout = timeout
        self.resources = tuple(resources)
        self.dra_drivers = frozenset(dra_drivers)
        self.calls = 0
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.PodResourcesListerStub | None = None

    async def list_assignments(self) -> tuple[Listed, ...]:
        """Every GPU/MIG device (per the resource patterns) the kubelet has assigned to a container on this node,
        then every device of a configured DRA driver a container got through a claim."""
        response = await self._call("List", pb.ListPodResourcesRequest())
        found: list[Listed] = []
        for pod in response.pod_resources:
            found.extend(self._pod_assignments(pod))
        return tuple(found)

    async def get_assignments(self, namespace: str, name: str) -> tuple[Listed, ...]:
        """One pod's devices via Get (beta, on by default from Kubernetes 1.34)."""
        request = pb.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace)
        response = await self._call("Get", request)
        return tuple(self._pod_assignments(response.pod_resources))

    async def allocatable_devices(self) -> tuple[tuple[str, str], ...]:
        """(resource, device ID) of every matching device the kubelet can hand out, assigned or not."""
        response = await self._call("GetAllocatableResources", pb.AllocatableResourcesRequest())
        found = {
            (devices.resource_name, split_replica(device_id)[0]): None  # replicas of one device count once
            for devices in response.devices
            if resource_matches(devices.resource_name, self.resources)
            for device_id in devices.device_ids
        }
        return tuple(found)

    async def allocatable_replicas(self) -> dict[str, int]:
        """Device (base ID) → how many replicas the kubelet can hand out of it, over the matching resources: n for
        a GPU shared as ``<uuid>::0…n-1`` (time-slicing or MPS), 1 for a device that is not shared."""
        response = await self._call("GetAllocatableResources", pb.AllocatableResourcesRequest())
        return count_replicas(
            device_id
            for devices in response.devices
            if resource_matches(devices.resource_name, self.resources)
            for device_id in devices.device_ids
        )

    async def close(self) -> None:
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            await channel.close()

    def _pod_assignments(self, pod: pb.PodResources) -> list[Listed]:
        found: list[Listed] = []
        for container in pod.containers:
            for devices in container.devices:
                if not resource_matches(devices.resource_name, self.resources):
                    continue
                for device_id in devices.device_ids:
                    base, replica = split_replica(device_id)
                    found.append(
                        DeviceAssignment(
                            device_id=base,
                            resource=devices.resource_name,
                            namespace=pod.namespace,
                            pod=pod.name,
                            container=container.name,
                            replica=replica,
                        )
                    )
            for dynamic in container.dynamic_resources:
                claim = ClaimRef(dynamic.claim_namespace or pod.namespace, dynamic.claim_name)
                found.extend(
                    ClaimDevice(driver=resource.driver_name, pool=resource.pool_name, device=resource.device_name,
                                claim=claim, namespace=pod.namespace, pod=pod.name, container=container.name)
                    for resource in dynamic.claim_resources
                    if resource.driver_name in self.dra_drivers and resource.device_name
                )
        return found

    async def _call(self, method: str, request):
        if not os.path.exists(self.socket_path):
            await self.close()
            raise KubeletUnavailable(f"kubelet socket {self.socket_path} does not exist")
        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(
                f"unix://{os.path.abspath(self.socket_path)}",
                options=[("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES)],
            )
            self._stub = pb_grpc.PodResourcesListerStub(self._channel)
        self.calls += 1
        try:
            return await getattr(self._stub, method)(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as error:
            raise await self._map_error(method, error) from None

    async def _map_error(self, method: str, error: grpc.aio.AioRpcError) -> KubeletError:
        code, details = error.code(), error.details() or ""
        text = f"PodResources {method} on {self.socket_path}: {code.name} {details}".strip()
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            await self.close()
            return KubeletUnavailable(text)
        if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
            return KubeletRateLimited(text)
        if code is grpc.StatusCode.UNKNOWN and "not found" in details:
            return KubeletPodNotFound(text)
        return KubeletError(text)


def _client(settings: AttributionSettings) -> PodResourcesClient:
    return PodResourcesClient(
        settings.kubelet_socket, timeout=settings.kubelet_timeout_seconds, resources=settings.resources,
        dra_drivers=(settings.dra_driver,) if settings.dra_driver else (),
    )


def replicas_from_settings(settings: AttributionSettings) -> KubeletReplicas:
    """The replica counts' wiring: a client of its own (its own channel: the assignments' client drops its channel
    after UNAVAILABLE, which must not cancel this one's call) behind the slow refresh."""
    return KubeletReplicas(_client(settings), refresh_seconds=settings.sharing.refresh_seconds,
                           backoff_max_seconds=settings.backoff_max_seconds)


def assignments_from_settings(settings: AttributionSettings) -> KubeletAssignments:
    """The production wiring: a client on the configured socket behind the refresh/backoff policy."""
    client = _client(settings)
    return KubeletAssignments(
        client,
        refresh_seconds=settings.refresh_seconds,
        unknown_refresh_seconds=settings.unknown_refresh_seconds,
        backoff_max_seconds=settings.backoff_max_seconds,
    )
