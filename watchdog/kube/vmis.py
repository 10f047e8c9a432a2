"""The KubeVirt VirtualMachineInstances on the agent's node, re-listed slowly: who the vGPU host's VMs are.

A VMI is a custom resource, and the API server offers no ``status.nodeName`` field selector for custom resources,
so KubeVirt labels each VMI ``kubevirt.io/nodeName: <node>`` (NodeNameLabel, kubevirt/kubevirt
staging/src/kubevirt.io/api/core/v1/types.go: "Needed because with CRDs we can't use field selectors"); one
``GET /apis/kubevirt.io/v1/virtualmachineinstances?labelSelector=kubevirt.io/nodeName=<node>`` lists them. VMs come
and go at the pace of people, so a list every ``refresh_seconds`` is enough, and a vGPU whose VMI is not listed yet
is only unattributed for that long. A cluster without KubeVirt answers 404: that is no error, just no VMIs. Any
other failure keeps the last good list, counted and backed off (kube/slow_read.py), for the vGPU → VMI join only (a
firmware UUID never changes): what the action rules act on, a VM's migration state and migratability, comes from
``fresh_vmis``, None while the last read failed, so a list that stopped refreshing is never acted on.

The same list carries what the action rules need before a launcher pod's eviction (docs/action.md, "Virtual
machines (KubeVirt)"): the eviction strategy KubeVirt will apply, whether the VM can live-migrate, whether a
migration is under way, and whether it holds a whole GPU. KubeVirt resolves the strategy as the VMI's
``spec.evictionStrategy``, else the KubeVirt CR's ``spec.configuration.evictionStrategy``
(kubevirt/kubevirt pkg/util/migrations VMIEvictionStrategy), so when a VMI names none the CR is listed
(``kubevirts``, any namespace; RBAC list). A CR that cannot be read (none, or 403) leaves the strategy unset: the
rules then assume an eviction stops the VM, the cautious reading.
"""

from __future__ import annotations

import logging
from typing import Any

from watchdog.kube.client import KubeApi
from watchdog.kube.errors import KubeForbidden, KubeNotFound
from watchdog.kube.slow_read import SlowRead
from watchdog.model import VmiInfo
from watchdog.model.vms import NVIDIA_PREFIX, is_vgpu_resource

log = logging.getLogger(__name__)

VMIS_PATH = "/apis/kubevirt.io/v1/virtualmachineinstances"
KUBEVIRTS_PATH = "/apis/kubevirt.io/v1/kubevirts"
NODE_NAME_LABEL = "kubevirt.io/nodeName"


def _object(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """parent[key] when it is an object, {} when absent or null; ValueError naming the field otherwise."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"a VirtualMachineInstance whose {where}{key} is not an object")
    return value


def vmi_info(obj: dict[str, Any], *, cluster_strategy: str = "") -> VmiInfo:
    """One VMI object as the join and the action rules need it; `cluster_strategy` is the KubeVirt CR's default
    eviction strategy ("" when none or unknown). Raises ValueError for one without a name or namespace, or with a
    part of the wrong shape."""
    meta, spec, status = _object(obj, "metadata", ""), _object(obj, "spec", ""), _object(obj, "status", "")
    if not meta.get("name") or not meta.get("namespace"):
        raise ValueError("a VirtualMachineInstance without metadata.name/namespace")
    domain = _object(spec, "domain", "spec.")
    firmware = _object(domain, "firmware", "spec.domain.")
    own = str(spec.get("evictionStrategy") or "")
    conditions = [c for c in status.get("conditions") or () if isinstance(c, dict)]
    migratable = any(c.get("type") == "LiveMigratable" and str(c.get("status")) == "True" for c in conditions)
    state = _object(status, "migrationState", "status.")
    ended = bool(state.get("endTimestamp") or state.get("completed") or state.get("failed"))
    evacuation = str(status.get("evacuationNodeName") or "")
    devices = _object(domain, "devices", "spec.domain.")
    names = [str(d.get("deviceName") or "") for key in ("gpus", "hostDevices")
             for d in devices.get(key) or () if isinstance(d, dict)]
    vgpus = tuple(n for n in names if is_vgpu_resource(n))
    whole = tuple(n for n in names if n.startswith(NVIDIA_PREFIX) and not is_vgpu_resource(n))
    return VmiInfo(namespace=str(meta["namespace"]), name=str(meta["name"]), uid=str(meta.get("uid") or ""),
                   firmware_uuid=str(firmware.get("uuid") or "").lower(), node=str(status.get("nodeName") or ""),
                   phase=str(status.get("phase") or ""), eviction_strategy=own or cluster_strategy,
                   strategy_from_cluster=not own and bool(cluster_strategy), live_migratable=migratable,
                   evacuation_node=evacuation,
                   migrating=bool(evacuation) or (bool(state.get("startTimestamp")) and not ended),
                   migration_end=str(state.get("endTimestamp") or "") if ended else "",
                   passthrough=whole, vgpu_resources=vgpus)


def cluster_eviction_strategy(body: dict[str, Any]) -> str:
    """The KubeVirt CR's spec.configuration.evictionStrategy from a list of kubevirts ("" when none sets it)."""
    for item in body.get("items") or ():
        if isinstance(item, dict):
            configuration = (item.get("spec") or {}).get("configuration") or {}
            if configuration.get("evictionStrategy"):
                return str(configuration["evictionStrategy"])
    return ""


async def read_cluster_strategy(api: KubeApi) -> str:
    """The KubeVirt CR's default eviction strategy; "" when there is no CR. Raises KubeForbidden when it may not be
    read (the caller decides what to say) and KubeError on any other failure."""
    try:
        return cluster_eviction_strategy(await api.request_json("GET", KUBEVIRTS_PATH))
    except KubeNotFound:
        return ""


class NodeVmis(SlowRead):
    """``await NodeVmis(api, node=…).run()`` keeps ``vmis`` current; ``read()`` lists once."""

    counter_prefix = "vmis"
    what = "VMIs"

    def __init__(self, api: KubeApi, *, node: str, refresh_seconds: float = 30.0, **kwargs: Any) -> None:
        super().__init__(api, node=node, refresh_seconds=refresh_seconds, **kwargs)

    @property
    def vmis(self) -> tuple[VmiInfo, ...] | None:
        """None until a list succeeded; then the last good one."""
        return self.value

    @vmis.setter
    def vmis(self, vmis: tuple[VmiInfo, ...] | None) -> None:
        self.value = vmis

    @property
    def fresh_vmis(self) -> tuple[VmiInfo, ...] | None:
        """The last list while the last read succeeded, else None: what the action rules may act on."""
        return self.value if not self.failures else None

    async def fetch(self) -> tuple[VmiInfo, ...]:
        """One list of this node's VMIs."""
        try:
            body = await self.api.request_json("GET", VMIS_PATH,
                                               query={"labelSelector": f"{NODE_NAME_LABEL}={self.node}"})
        except KubeNotFound:
            return ()  # kubevirt.io/v1 is not served: no KubeVirt, no VMIs
        items = body.get("items")
        if not isinstance(items, list):
            raise ValueError("the list has no items")
        objects = [item for item in items if isinstance(item, dict)]
        needs_default = any(not isinstance(item.get("spec"), dict) or not item["spec"].get("evictionStrategy")
                            for item in objects)
        default = await self._cluster_strategy() if needs_default else ""
        # One VMI of the wrong shape is left out (its launcher pod is then never a candidate) rather than failing
        # the list, which would keep every other VMI at its last good, ever older, state.
        found = []
        for item in objects:
            try:
                found.append(vmi_info(item, cluster_strategy=default))
            except ValueError as error:
                self.errors["malformed"] = self.errors.get("malformed", 0) + 1
                log.warning("node %s: a VMI left out of the list: %s", self.node, error)
        return tuple(found)

    async def _cluster_strategy(self) -> str:
        """The KubeVirt CR's default eviction strategy; "" when it is absent or may not be read (403, logged once).
        Other failures raise, so the last good list is kept."""
        try:
            return await read_cluster_strategy(self.api)
        except KubeForbidden as error:
            if not getattr(self, "_forbidden_logged", False):
                log.warning("cannot list kubevirts (RBAC list on kubevirt.io kubevirts): VMIs without their own "
                            "evictionStrategy are taken to stop on eviction: %s", error)
                self._forbidden_logged = True
            return ""
