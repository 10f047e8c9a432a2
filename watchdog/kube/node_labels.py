"""The agent's own Node's labels, re-read slowly: what GPU Feature Discovery says of the node's GPUs.

GFD labels the node ``nvidia.com/gpu.sharing-strategy`` and ``nvidia.com/gpu.replicas`` (k8s-device-plugin README,
"Shared Access to GPUs"); they change only when the device plugin is reconfigured, so one GET of
``/api/v1/nodes/<node>`` at start and then every ``refresh_seconds`` (kube/slow_read.py: the last good labels kept
on a failure, counted and backed off) is enough.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

from watchdog.kube.client import KubeApi
from watchdog.kube.slow_read import SlowRead


class NodeLabels(SlowRead):
    """``await NodeLabels(api, node=…).run()`` keeps ``labels`` current; ``read()`` reads once."""

    counter_prefix = "node_labels"
    what = "labels"

    def __init__(self, api: KubeApi, *, node: str, refresh_seconds: float = 300.0, **kwargs: Any) -> None:
        super().__init__(api, node=node, refresh_seconds=refresh_seconds, **kwargs)

    @property
    def labels(self) -> Mapping[str, str] | None:
        """None until a read succeeded; then the last good labels (a new object only on a change)."""
        return self.value

    @labels.setter
    def labels(self, labels: Mapping[str, str] | None) -> None:
        self.value = labels

    async def fetch(self) -> Mapping[str, str]:
        """One GET of the Node."""
        node = await self.api.request_json("GET", f"/api/v1/nodes/{self.node}")
        labels = (node.get("metadata") or {}).get("labels") or {}
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise ValueError("metadata.labels is not a map of strings")
        return MappingProxyType(dict(labels))
