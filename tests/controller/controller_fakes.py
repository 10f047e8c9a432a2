"""In-memory Kubernetes for the controller tests: pods to list, evictions and Events recorded."""

from __future__ import annotations

from dataclasses import dataclass, field

from watchdog.model import EvictionResult as R
from watchdog.model import PodInfo


@dataclass
class Reply:
    result: R
    http_status: int | None = 201
    message: str = ""
    retry_after: float | None = None


@dataclass
class MemoryKube:
    pods: list[PodInfo] = field(default_factory=list)
    evictions: list = field(default_factory=list)
    events: list = field(default_factory=list)
    list_fails: bool = False

    async def list_pods(self, *, label_selector=None, field_selector=None, namespace=None):
        if self.list_fails:
            raise ConnectionError("apiserver down")
        found = [p for p in self.pods if namespace is None or p.namespace == namespace]
        if field_selector:
            name = field_selector.split("=", 1)[1]
            found = [p for p in found if p.name == name]
        return found

    async def evict(self, pod, *, dry_run, grace_seconds=None):
        self.evictions.append((pod.key, dry_run))
        return Reply(R.DRY_RUN if dry_run else R.EVICTED)

    async def record_event(self, pod, **kw):
        self.events.append(pod.key)
        return True


class Gate:
    """A kill switch under the test's control, as the evictor sees one (watchdog.action.SendGate)."""

    def __init__(self, on: bool = False) -> None:
        self.on = on

    @property
    def switched_on(self) -> bool:
        return self.on

    async def confirm(self) -> str | None:
        return "kill switch is on" if self.on else None


def gpu_pod(name, *, ns="team-b", priority=0, created=0.0):
    """A scheduled, Running pod holding one GPU (created long before the test alerts' startsAt)."""
    return PodInfo(uid=f"u-{name}", namespace=ns, name=name, priority=priority, node="node-1", created=created,
                   gpu_resources=("nvidia.com/gpu",))
