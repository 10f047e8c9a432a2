"""A kubelet PodResources v1 server on a real unix socket, for tests and the demo.

It is a real ``grpc.aio`` server speaking the same wire contract as the kubelet, so the client is exercised end to end
(socket, HTTP/2, deadlines, status codes) rather than through a mock. Its answers and failures mirror the kubelet's
(kubernetes pkg/kubelet/apis/podresources, grpc/ratelimit.go and server_v1.go): RESOURCE_EXHAUSTED "rejected by rate
limit" from the limiter, UNKNOWN "pod X in namespace Y not found" from Get, and "PodResources API Get method disabled"
before 1.34. It can be stopped and started again on the same path, as a kubelet restart does.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Iterable, Mapping, Sequence

import grpc

from watchdog.attribution.proto import podresources_v1_pb2 as pb
from watchdog.attribution.proto import podresources_v1_pb2_grpc as pb_grpc

ContainerSpec = tuple[str, str, Sequence[str]]
"""(container name, resource name, device IDs) — device IDs may carry a ``::n`` replica suffix."""
PodSpec = tuple[str, str, Sequence[ContainerSpec]]
"""(namespace, pod name, containers)."""
ClaimSpec = tuple[str, str, str, str, str, str, str, str]
"""(namespace, pod, container, claim namespace, claim name, driver, pool, device): one DRA device of a container."""


class FakeKubelet(pb_grpc.PodResourcesListerServicer):
    """Serves List/GetAllocatableResources/Get from ``set_pods``; switch faults on with the public attributes."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.rate_limit = False  # every call answers RESOURCE_EXHAUSTED, as the kubelet's limiter does
        self.get_disabled = False  # Get answers as a kubelet without the KubeletPodResourcesGet feature gate
        self.calls = 0
        self.calls_by_method: Counter[str] = Counter()
        self.extra_allocatable: dict[str, list[str]] = {}  # resource → device IDs free on top of the assigned ones
        # resource → every device ID the device plugins advertise (set_allocatable); None: only the assigned ones
        self._allocatable: dict[str, list[str]] | None = None
        self._pods: dict[tuple[str, str], pb.PodResources] = {}
        self._server: grpc.aio.Server | None = None

    def set_pods(self, pods: Iterable[PodSpec], *, claims: Iterable[ClaimSpec] = ()) -> None:
        """Replace what the kubelet has assigned: ``[(namespace, name, [(container, resource, [ids]), …]), …]``,
        and the devices containers got through DRA claims (``ContainerResources.dynamic_resources``)."""
        containers_of: dict[tuple[str, str], dict[str, pb.ContainerResources]] = {}
        for namespace, name, containers in pods:
            by_container = containers_of.setdefault((namespace, name), {})
            for container, resource, device_ids in containers:
                entry = by_container.setdefault(container, pb.ContainerResources(name=container))
                entry.devices.append(pb.ContainerDevices(resource_name=resource, device_ids=list(device_ids)))
        for namespace, name, container, claim_namespace, claim_name, driver, pool, device in claims:
            entry = containers_of.setdefault((namespace, name), {}).setdefault(
                container, pb.ContainerResources(name=container))
            entry.dynamic_resources.append(pb.DynamicResource(
                claim_name=claim_name, claim_namespace=claim_namespace,
                claim_resources=[pb.ClaimResource(driver_name=driver, pool_name=pool, device_name=device,
                                                  cdi_devices=[pb.CDIDevice(name=f"k8s.{driver}/claim={device}")])]))
        self._pods = {
            (namespace, name): pb.PodResources(name=name, namespace=namespace, containers=list(by_container.values()))
            for (namespace, name), by_container in containers_of.items()
        }

    def set_allocatable(self, devices: Mapping[str, Sequence[str]] | None) -> None:
        """What GetAllocatableResources lists besides ``extra_allocatable``: every device the plugins advertise,
        assigned or not (replicas of a shared GPU as ``<uuid>::<n>``), as a real kubelet does; None lists only the
        devices assigned to pods."""
        self._allocatable = None if devices is None else {resource: list(ids) for resource, ids in devices.items()}

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError(f"fake kubelet on {self.socket_path} is already running")
        _unlink_stale(self.socket_path)
        server = grpc.aio.server()
        pb_grpc.add_PodResourcesListerServicer_to_server(self, server)
        if server.add_insecure_port(f"unix:{os.path.abspath(self.socket_path)}") == 0:
            raise RuntimeError(f"fake kubelet could not bind {self.socket_path}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace=None)
        _unlink_stale(self.socket_path)

    async def List(self, request, context):  # noqa: N802 - gRPC method names are the proto's
        await self._admit("List", context)
        return pb.ListPodResourcesResponse(pod_resources=list(self._pods.values()))

    async def GetAllocatableResources(self, request, context):  # noqa: N802
        await self._admit("GetAllocatableResources", context)
        by_resource: dict[str, list[str]] = {}
        for pod in self._pods.values() if self._allocatable is None else ():
            for container in pod.containers:
                for devices in container.devices:
                    by_resource.setdefault(devices.resource_name, []).extend(devices.device_ids)
        for resource, device_ids in (self._allocatable or {}).items():
            by_resource.setdefault(resource, []).extend(device_ids)
        for resource, device_ids in self.extra_allocatable.items():
            by_resource.setdefault(resource, []).extend(device_ids)
        return pb.AllocatableResourcesResponse(
            devices=[
                pb.ContainerDevices(resource_name=resource, device_ids=sorted(set(ids)))
                for resource, ids in sorted(by_resource.items())
            ]
        )

    async def Get(self, request, context):  # noqa: N802
        await self._admit("Get", context)
        if self.get_disabled:
            await context.abort(grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")
        pod = self._pods.get((request.pod_namespace, request.pod_name))
        if pod is None:
            # pkg/kubelet/apis/podresources/server_v1.go answers a plain error, which gRPC sends as UNKNOWN.
            await context.abort(
                grpc.StatusCode.UNKNOWN,
                f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
            )
        return pb.GetPodResourcesResponse(pod_resources=pod)

    async def _admit(self, method: str, context: grpc.aio.ServicerContext) -> None:
        self.calls += 1
        self.calls_by_method[method] += 1
        if self.rate_limit:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")


def _unlink_stale(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
