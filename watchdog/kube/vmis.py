"""The KubeVirt VirtualMachineInstances on the agent's node, re-listed slowly: who the vGPU host's VMs are.

A VMI is a custom resource, and the API server offers no ``status.nodeName`` field selector for custom resources,
so KubeVirt labels each VMI ``kubevirt.io/nodeName: <node>`` (NodeNameLabel, kubevirt/kubevirt
staging/src/kubevirt.io/api/core/v1/types.go: "Needed because with CRDs we can't use field selectors"); one
``GET /apis/kubevirt.io/v1/virtualmachineinstances?labelSelector=kubevirt.io/nodeName=<node>`` lists them. VMs come
and go at the pace of people, so a list every ``refresh_seconds`` is enough, and a vGPU whose VMI is not listed yet
is only unattributed for that long. A cluster without KubeVirt answers 404: that is no error, just no VMIs. Any
other failure keeps the last good list, counted and backed off (kube/slow_read.py).
"""

from __future__ import annotations

from typing import Any

from watchdog.kube.client import KubeApi
from watchdog.kube.errors import KubeNotFound
from watchdog.kube.slow_read import SlowRead
from watchdog.model import VmiInfo

VMIS_PATH = "/apis/kubevirt.io/v1/virtualmachineinstances"
NODE_NAME_LABEL = "kubevirt.io/nodeName"


def vmi_info(obj: dict[str, Any]) -> VmiInfo:
    """One VMI object as the join needs it; raises ValueError for one without a name or namespace."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    if not meta.get("name") or not meta.get("namespace"):
        raise ValueError("a VirtualMachineInstance without metadata.name/namespace")
    firmware = (spec.get("domain") or {}).get("firmware") or {}
    return VmiInfo(namespace=str(meta["namespace"]), name=str(meta["name"]), uid=str(meta.get("uid") or ""),
                   firmware_uuid=str(firmware.get("uuid") or "").lower(), node=str(status.get("nodeName") or ""),
                   phase=str(status.get("phase") or ""))


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
        return tuple(vmi_info(item) for item in items if isinstance(item, dict))
