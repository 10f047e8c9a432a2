"""One tick's attribution as the agent does it: the kubelet's assignments, /proc and the pod cache, joined.

``attribution.join`` is the pure join; this is the stateful part around it that only a running agent has: which
kubelet List the tick can trust, which NVML devices the kubelet has never heard of, and which (device, pod) pairs
are too new to be judged. A failure here is the cycle's to count: ``attribute`` raises, and the cycle then treats
the tick as unattributed (which means "do not evict").
"""

from __future__ import annotations

import dataclasses
import logging
from types import MappingProxyType
from typing import Callable, Mapping, Protocol, Sequence

from watchdog.attribution.join import attribute, unassigned_processes, unknown_devices, unresolvable_device_ids
from watchdog.model import Attribution, DeviceAssignment, NodeSample, PodIndex

log = logging.getLogger(__name__)


class KubeletView(Protocol):
    """What attribution needs of ``attribution.assignments.KubeletAssignments``."""

    @property
    def assignments(self) -> Sequence[DeviceAssignment]: ...

    @property
    def ok(self) -> bool: ...

    @property
    def listed_at(self) -> float: ...

    def note_unknown(self, device: str, now: float) -> None: ...

    def request_refresh(self) -> None: ...


class PodSource(Protocol):
    """The watch-fed pod cache (``attribution.pods.PodCache``)."""

    def index(self, tenant_label: str | None) -> PodIndex: ...


class ProcView(Protocol):
    """``attribution.proc.ProcReader``: PID → pod UID / container, with its own failure tallies."""

    def read(self, pids: Sequence[int]) -> Mapping: ...

    @property
    def counters(self) -> Mapping[str, int]: ...


class NodeAttributor:
    """Attributes each sample; ``error_counts()`` are the /proc reader's failures, for the state's error sources."""

    def __init__(
        self,
        *,
        kubelet: KubeletView | None,
        pods: PodSource | None,
        pods_ok: Callable[[], bool],
        proc: ProcView | None,
        clock: Callable[[], float],
    ) -> None:
        self.kubelet = kubelet
        self.pods = pods
        self.pods_ok = pods_ok
        self.proc = proc
        self.clock = clock
        self._pairs_seen: dict[tuple[str, str], float] = {}  # (device, pod) not listed → first seen
        self._unresolvable_logged = False

    def error_counts(self) -> dict[str, int]:
        counters = self.proc.counters if self.proc is not None else {}
        return {f"proc_{k}": v for k, v in counters.items() if k in ("vanished", "denied", "errors")}

    def attribute(self, sample: NodeSample, *, tenant_label: str | None) -> Attribution:
        assignments = self.kubelet.assignments if self.kubelet is not None else ()
        kubelet_ok = bool(self.kubelet is not None and self.kubelet.ok)
        unresolvable = unresolvable_device_ids(assignments)
        if unresolvable:  # nothing can be joined by UUID: the kubelet side is as good as unreadable
            kubelet_ok = False
            if not self._unresolvable_logged:
                log.error("kubelet device IDs are not NVML UUIDs (%s…): attribution degraded; set the device "
                          "plugin's deviceIDStrategy=uuid", ", ".join(unresolvable[:3]))
                self._unresolvable_logged = True
        if self.kubelet is not None and kubelet_ok:
            now = self.clock()
            for device in unknown_devices(sample, assignments):
                self.kubelet.note_unknown(device, now)
        pids = [p.pid for gpu in sample.gpus for p in gpu.processes]
        pids += [p.pid for gpu in sample.gpus for mig in gpu.instances for p in mig.processes]
        proc = self.proc.read(pids) if self.proc is not None else {}
        index = self.pods.index(tenant_label) if self.pods is not None else PodIndex(tenant_label=tenant_label)
        result = attribute(
            sample,
            assignments=assignments,
            index=index,
            proc=proc,
            kubelet_ok=kubelet_ok,
            api_ok=self.pods_ok(),
        )
        result = self._hold_back_unconfirmed(sample, result)
        result.usage(sample)  # summed here, once, after the hold-back: detection and every scrape read these sums
        return result

    def _hold_back_unconfirmed(self, sample: NodeSample, attribution: Attribution) -> Attribution:
        """A process on a device its pod is not (yet) listed for stays unattributed until a kubelet List that
        started after it was first seen still does not list it: a pod that just got the device is not in the last
        List, and must not be called unauthorized for that."""
        if self.kubelet is None or not attribution.healthy:
            return attribution
        now, listed_at = self.clock(), self.kubelet.listed_at
        pairs = unassigned_processes(sample, attribution)
        seen = {pair: self._pairs_seen.get(pair, now) for pair in pairs.values()}
        if any(pair not in self._pairs_seen for pair in seen):
            self.kubelet.request_refresh()
        self._pairs_seen = seen
        held = {pid for pid, pair in pairs.items() if listed_at < seen[pair]}
        if not held:
            return attribution
        kept = {pid: ref for pid, ref in attribution.processes.items() if pid not in held}
        return dataclasses.replace(attribution, processes=MappingProxyType(kept))


def why_unhealthy(attribution: Attribution) -> str:
    reasons = []
    if not attribution.kubelet_ok:
        reasons.append("kubelet pod-resources unavailable")
    if not attribution.api_ok:
        reasons.append("pod metadata unavailable")
    return "; ".join(reasons)
