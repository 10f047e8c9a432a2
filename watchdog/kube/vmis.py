"""The KubeVirt VirtualMachineInstances on the agent's node, re-listed slowly: who the vGPU host's VMs are.

A VMI is a custom resource, and the API server offers no ``status.nodeName`` field selector for custom resources,
so KubeVirt labels each VMI ``kubevirt.io/nodeName: <node>`` (NodeNameLabel, kubevirt/kubevirt
staging/src/kubevirt.io/api/core/v1/types.go: "Needed because with CRDs we can't use field selectors"); one
``GET /apis/kubevirt.io/v1/virtualmachineinstances?labelSelector=kubevirt.io/nodeName=<node>`` lists them. VMs come
and go at the pace of people, so a list every ``refresh_seconds`` is enough, and a vGPU whose VMI is not listed yet
is only unattributed for that long. A cluster without KubeVirt answers 404: that is no error, just no VMIs. Any
other failure keeps the last good list, is counted (``error_counts``) and logged once per outage; retries back off
from 1 s, doubling, up to ``backoff_max_seconds``. Nothing here blocks a tick: the tick reads ``vmis``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any, Awaitable, Callable

from watchdog.kube.client import KubeApi
from watchdog.kube.errors import KubeError, KubeNotFound
from watchdog.model import VmiInfo

log = logging.getLogger(__name__)

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


class NodeVmis:
    """``await NodeVmis(api, node=…).run()`` keeps ``vmis`` current; ``read()`` lists once."""

    def __init__(self, api: KubeApi, *, node: str, refresh_seconds: float = 30.0,
                 backoff_initial_seconds: float = 1.0, backoff_max_seconds: float = 60.0,
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        if not node:
            raise ValueError("NodeVmis needs the node's name")
        if refresh_seconds <= 0 or not 0 < backoff_initial_seconds <= backoff_max_seconds:
            raise ValueError("need refresh_seconds > 0 and 0 < backoff_initial_seconds <= backoff_max_seconds")
        self.api, self.node = api, node
        self.refresh_seconds = refresh_seconds
        self.backoff_initial, self.backoff_max = backoff_initial_seconds, backoff_max_seconds
        self.sleep = sleep
        self.vmis: tuple[VmiInfo, ...] | None = None  # None until a list succeeded; then the last good one
        self.reads = 0
        self.failures = 0
        self.errors: dict[str, int] = {}

    def error_counts(self) -> dict[str, int]:
        return {f"vmis_{kind}": n for kind, n in self.errors.items()}

    async def read(self) -> bool:
        """One list of this node's VMIs; True when it succeeded. Never raises (cancellation aside)."""
        self.reads += 1
        try:
            body = await self.api.request_json("GET", VMIS_PATH,
                                               query={"labelSelector": f"{NODE_NAME_LABEL}={self.node}"})
            items = body.get("items")
            if not isinstance(items, list):
                raise ValueError("the list has no items")
            vmis = tuple(vmi_info(item) for item in items if isinstance(item, dict))
        except KubeNotFound:
            vmis = ()  # kubevirt.io/v1 is not served: no KubeVirt, no VMIs
        except (KubeError, ValueError, AttributeError) as error:
            kind = "malformed" if not isinstance(error, KubeError) else re.sub(
                r"(?<!^)(?=[A-Z])", "_", type(error).__name__.removeprefix("Kube") or "error").lower()
            self.errors[kind] = self.errors.get(kind, 0) + 1
            if not self.failures:
                log.warning("cannot list node %s's VMIs (%s), keeping the last ones: %s", self.node, kind, error)
            self.failures += 1
            return False
        if self.failures:
            log.info("node %s's VMIs listable again after %d failed list(s)", self.node, self.failures)
        self.failures = 0
        if self.vmis != vmis:  # a new object only on a change
            self.vmis = vmis
        return True

    async def run(self) -> None:
        """Long-running agent: list, then wait ``refresh_seconds`` (or the backoff after a failure), until cancelled."""
        while True:
            await self.read()
            if self.failures:
                await self.sleep(min(self.backoff_max, self.backoff_initial * 2 ** min(self.failures - 1, 32)))
            else:
                await self.sleep(self.refresh_seconds)
