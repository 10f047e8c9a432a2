"""The GPU driver's ResourceSlices for this node, list + watch, read into ``ResourceSliceInfo``.

A device handed out through Dynamic Resource Allocation is named by (driver, pool, device); its NVML identity is
only in the driver's ResourceSlices (``resource.k8s.io/v1``), as device attributes. NVIDIA's DRA driver for GPUs
publishes, per device (NVIDIA/k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin/deviceinfo.go, ``GpuInfo.GetDevice`` and
``MigDeviceInfo.GetDevice``): ``type`` ("gpu" | "mig" | "vfio"), ``uuid`` (the NVML UUID), and for a MIG device
``parentUUID`` and ``profile`` ("1g.18gb"); devices are named ``gpu-<minor>`` and
``gpu-<minor>-mig-<giProfileId>-<placementStart>-<placementSize>``. An attribute name without a domain is in the
driver's own domain (resource.k8s.io/v1 ``QualifiedName``), so ``gpu.nvidia.com/uuid`` is read the same as ``uuid``.

The watch follows the same reflector contract as the pod watch (``kube.pods.PodWatcher``, which this reuses with
another request): the selection is ``spec.nodeName=<node>,spec.driver=<driver>``, both selectable fields of
ResourceSlice (kubernetes pkg/apis/resource/v1/conversion.go, addConversionFuncs), so RBAC needs only list and
watch on ``resourceslices``. A MIG device the driver creates when a claim asks for it shows up (or gains its
``uuid``) as a MODIFIED slice, and goes away the same way when the claim is released: the cache follows without
any polling, and a scrape never calls the API.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from watchdog.kube.client import KubeApi
from watchdog.kube.errors import KubeNotFound, translate
from watchdog.kube.pods import PodWatcher
from watchdog.model import ResourceSliceInfo, SliceDevice

log = logging.getLogger(__name__)


def _attribute(attributes: Mapping[str, Any], driver: str, name: str) -> str | None:
    """A string attribute by its short or driver-qualified name (v1 DeviceAttribute JSON: {"string": …})."""
    value = attributes.get(name)
    if value is None:
        value = attributes.get(f"{driver}/{name}")
    if not isinstance(value, Mapping):
        return None
    text = value.get("string")
    return text if isinstance(text, str) and text else None


def slice_info(obj: Mapping[str, Any]) -> ResourceSliceInfo:
    """A ``ResourceSliceInfo`` from a resource.k8s.io/v1 ResourceSlice as the API sends it (a JSON dict).

    Raises ValueError for an object that is not a readable slice (no name, driver or pool).
    """
    if not isinstance(obj, Mapping):
        raise ValueError(f"a ResourceSlice must be an object, got {type(obj).__name__}")
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    pool = spec.get("pool") or {}
    name, driver, pool_name = meta.get("name"), spec.get("driver"), pool.get("name")
    if not name or not driver or not pool_name:
        raise ValueError(f"a ResourceSlice needs metadata.name, spec.driver and spec.pool.name, got {obj!r:.200}")
    devices = []
    for device in spec.get("devices") or []:
        if not isinstance(device, Mapping) or not device.get("name"):
            raise ValueError(f"ResourceSlice {name}: a device without a name: {device!r:.200}")
        attributes = device.get("attributes") or {}
        devices.append(SliceDevice(
            driver=driver, pool=pool_name, device=device["name"],
            uuid=_attribute(attributes, driver, "uuid"), parent_uuid=_attribute(attributes, driver, "parentUUID"),
            type=_attribute(attributes, driver, "type") or "", profile=_attribute(attributes, driver, "profile")))
    return ResourceSliceInfo(name=name, driver=driver, pool=pool_name, generation=int(pool.get("generation") or 0),
                             devices=tuple(devices))


class ResourceSliceWatcher(PodWatcher):
    """``await ResourceSliceWatcher(api, node=…, driver=…, on_event=…, on_relist=…).run()``: the same
    list/watch, resourceVersion, bookmark, 410 and backoff rules as the pod watch, for one driver's slices on one
    node.

    ``on_relist`` gets every slice after each list; ``on_event`` gets ("ADDED" | "MODIFIED" | "DELETED", info).
    """

    _what = "resourceslice"

    def __init__(self, api: KubeApi, *, node: str, driver: str, on_event: Callable[[str, ResourceSliceInfo], None],
                 on_relist: Callable[[list[ResourceSliceInfo]], None], **options: Any):
        if not driver:
            raise ValueError("ResourceSliceWatcher needs the DRA driver name (spec.driver) to select its slices")
        super().__init__(api, node=node, on_event=on_event, on_relist=on_relist, **options)  # type: ignore[arg-type]
        self.driver = driver
        self.counters["not_served"] = 0
        self.not_served = False  # the cluster does not serve resource.k8s.io/v1 (before Kubernetes 1.34)

    @property
    def error_counts(self) -> dict[str, int]:
        """The watch's failures, for ``errors_total{stage="attribution"}``; a cluster without the DRA API is not
        one (it is counted as ``not_served`` and logged once)."""
        return {"resourceslice_watch": self.counters["errors"], "resourceslice_malformed": self.counters["malformed"]}

    def _failed(self, error: Exception) -> None:
        try:
            described: Exception = translate(error)
        except TypeError:
            described = error
        if isinstance(described, KubeNotFound):
            # 404 on the collection: resource.k8s.io/v1 is not served (it is GA from Kubernetes 1.34). There can be
            # no claims then either; keep asking at the backoff's pace, quietly, in case the cluster is upgraded.
            self.counters["not_served"] += 1
            self._ok = False
            if not self.not_served:
                log.info("resource.k8s.io/v1 ResourceSlices are not served by this API server: no DRA attribution "
                         "until they are (%s)", error)
            self.not_served = True
            return
        self.not_served = False
        super()._failed(error)

    def _succeeded(self) -> None:
        if self.not_served:
            log.info("resource.k8s.io/v1 ResourceSlices are served now: DRA attribution on")
        self.not_served = False
        super()._succeeded()

    @property
    def _selector(self) -> str:
        return f"spec.nodeName={self.node},spec.driver={self.driver}"

    async def _request(self, **query: Any) -> Any:
        timeout = query.pop("_request_timeout", None)
        return await self.api.send("GET", "/apis/resource.k8s.io/v1/resourceslices", query=query, timeout=timeout)

    def _describe(self, info: Any) -> str:
        return info.name

    def _pod_or_none(self, obj: Any, how: str) -> ResourceSliceInfo | None:  # type: ignore[override]
        try:
            return slice_info(obj)
        except (ValueError, TypeError, AttributeError) as error:
            self.counters["malformed"] += 1
            log.warning("resourceslice watch on %s: skipping a malformed %s object: %s", self.node, how, error)
            return None
