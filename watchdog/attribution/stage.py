"""The attribution stage as a running agent does it: the kubelet's assignments, /proc and the pod cache, joined.

``join.attribute`` is the pure join; this is the stateful part around it that only a running agent has: which
kubelet List the tick can trust, which NVML devices the kubelet has never heard of, and which (device, pod) pairs
are too new to be judged. It lives with the join rather than in the service so that the service only wires the
stage's sources (``assignments``, ``pods``, ``proc``, ``slices``, ``sharing``, ``vmis``) to it, and so that it can be tested
with plain fakes of those sources.

Devices allocated through DRA are resolved here from the kubelet's claim tuples and the slice cache's frozen index;
a pod whose claimed device no slice names yet (a MIG device created at claim time) has its processes held back like
an unconfirmed pair, never judged unauthorized. The tick's pod index is built here too, with the tenant label of
the policy in force: it is the one carrier of the tenant rule that detection, action and publishing read. A failure
here is the cycle's to count: ``attribute`` raises, and the cycle then treats the tick as unattributed (which means
"do not evict").
"""

from __future__ import annotations

import dataclasses
import logging
from types import MappingProxyType
from typing import Callable, Mapping, Protocol, Sequence

from watchdog.attribution.join import (attribute, resolve_claim_devices, unassigned_processes, unknown_devices,
                                       unresolvable_device_ids)
from watchdog.attribution.sharing_sources import NodeSharing
from watchdog.attribution.vgpus import vgpu_owners, vmis_by_uid
from watchdog.model import (EMPTY, Attribution, ClaimDevice, DeviceAssignment, HostProcess, NodeSample, PodIndex,
                            SliceDevice, SliceKey, VmiInfo)

log = logging.getLogger(__name__)


class KubeletView(Protocol):
    """What attribution needs of ``attribution.assignments.KubeletAssignments``."""

    @property
    def assignments(self) -> Sequence[DeviceAssignment]: ...

    @property
    def claim_devices(self) -> Sequence[ClaimDevice]: ...

    @property
    def ok(self) -> bool: ...

    @property
    def listed_at(self) -> float: ...

    def note_unknown(self, device: str, now: float) -> None: ...

    def request_refresh(self) -> None: ...


class PodSource(Protocol):
    """The watch-fed pod cache (``attribution.pods.PodCache``)."""

    def index(self, tenant_label: str | None) -> PodIndex: ...


class SliceSource(Protocol):
    """The watch-fed ResourceSlice cache (``attribution.slices.SliceCache``)."""

    def index(self) -> Mapping[SliceKey, SliceDevice]: ...


class VmiSource(Protocol):
    """The node's KubeVirt VMIs as last listed (``kube.vmis.NodeVmis``): None until a list succeeded."""

    @property
    def vmis(self) -> Sequence[VmiInfo] | None: ...

    @property
    def fresh_vmis(self) -> Sequence[VmiInfo] | None:
        """The same while the last read succeeded, else None: the action rules' facts (Attribution.vmis)."""
        ...

    def error_counts(self) -> Mapping[str, int]: ...


class ProcView(Protocol):
    """``attribution.proc.ProcReader``: PID → pod UID / container, with its own failure tallies."""

    def read(self, pids: Sequence[int]) -> Mapping: ...

    @property
    def counters(self) -> Mapping[str, int]: ...

    @property
    def hosts(self) -> Mapping[int, HostProcess]: ...

    @property
    def infrastructure(self) -> frozenset[int]: ...


class NodeAttributor:
    """Attributes each sample; ``error_counts()`` are the /proc reader's and the sharing sources' failures, for the
    state's error sources."""

    def __init__(
        self,
        *,
        kubelet: KubeletView | None,
        pods: PodSource | None,
        pods_ok: Callable[[], bool],
        proc: ProcView | None,
        clock: Callable[[], float],
        slices: SliceSource | None = None,
        slices_ok: Callable[[], bool | None] | None = None,
        sharing: NodeSharing | None = None,
        vmis: VmiSource | None = None,
    ) -> None:
        self.kubelet = kubelet
        self.vmis = vmis
        self.sharing = sharing
        self.slices = slices
        self.slices_ok = slices_ok  # None, or None answered: no ResourceSlices to watch (no DRA driver, or API)
        self.pods = pods
        self.pods_ok = pods_ok
        self.proc = proc
        self.clock = clock
        self._pairs_seen: dict[tuple[str, str], float] = {}  # (device, pod) not listed → first seen
        self._unresolvable_logged = False
        self._unresolved_logged: frozenset[ClaimDevice] = frozenset()
        self.unresolved_claim_devices: tuple[ClaimDevice, ...] = ()  # this tick's, for tests and the log

    def error_counts(self) -> dict[str, int]:
        counters = self.proc.counters if self.proc is not None else {}
        counts = {f"proc_{k}": v for k, v in counters.items() if k in ("vanished", "denied", "errors")}
        if self.sharing is not None:
            counts.update(self.sharing.error_counts())
        if self.vmis is not None:
            counts.update(self.vmis.error_counts())
        return counts

    def attribute(self, sample: NodeSample, *, tenant_label: str | None) -> Attribution:
        """This tick's attribution; its ``index`` counts tenants under ``tenant_label`` (the runtime policy's)."""
        assignments = self.kubelet.assignments if self.kubelet is not None else ()
        kubelet_ok = bool(self.kubelet is not None and self.kubelet.ok)
        unresolvable = unresolvable_device_ids(assignments)
        assignments = (*assignments, *self._resolve_claims(sample, taken=[a.device_id for a in assignments]))
        if unresolvable:  # nothing can be joined by UUID: the kubelet side is as good as unreadable
            kubelet_ok = False
            if not self._unresolvable_logged:
                log.error("kubelet device IDs are not NVML UUIDs (%s…): attribution degraded; set the device "
                          "plugin's deviceIDStrategy=uuid", ", ".join(unresolvable[:3]))
                self._unresolvable_logged = True
        # A busy device no assignment names is news for the kubelet, unless a claimed device is still waiting for
        # its slice: then that is the likelier owner, and another List would not tell more.
        if self.kubelet is not None and kubelet_ok and not self.unresolved_claim_devices:
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
            hosts=self.proc.hosts if self.proc is not None else None,
            infrastructure=self.proc.infrastructure if self.proc is not None else frozenset(),
            sharing=self.sharing.for_sample(sample) if self.sharing is not None else EMPTY,
        )
        vmis = self.vmis.vmis if self.vmis is not None else None
        fresh = self.vmis.fresh_vmis if self.vmis is not None else None  # never act on a list gone stale
        result = dataclasses.replace(result, slices_ok=self.slices_ok() if self.slices_ok is not None else None,
                                     claims_held=len(self.unresolved_claim_devices),
                                     vgpus=vgpu_owners(sample, vmis, index) if vmis else EMPTY,
                                     vmis=vmis_by_uid(fresh) if fresh else EMPTY)
        result = self._hold_back_unconfirmed(sample, result)
        result.usage(sample)  # summed here, once, after the hold-back: detection and every scrape read these sums
        return result

    def _resolve_claims(self, sample: NodeSample, *, taken: Sequence[str]) -> tuple[DeviceAssignment, ...]:
        """The kubelet's DRA tuples as assignments, through the slice index; the unresolved ones are kept for the
        hold-back and logged once each."""
        claimed = self.kubelet.claim_devices if self.kubelet is not None else ()
        if not claimed:
            self.unresolved_claim_devices = ()
            return ()
        resolved, unresolved = resolve_claim_devices(claimed, self.slices.index() if self.slices else EMPTY,
                                                     sample=sample, taken=taken)
        self.unresolved_claim_devices = unresolved
        fresh = set(unresolved) - self._unresolved_logged
        for claim_device in sorted(fresh, key=lambda c: (c.namespace, c.pod, c.slice_key)):
            log.info("claim %s of pod %s/%s: device %s has no NVML UUID in any ResourceSlice yet; its processes are "
                     "held back", claim_device.claim.key, claim_device.namespace, claim_device.pod,
                     "/".join(claim_device.slice_key))
        self._unresolved_logged = frozenset(unresolved)
        return resolved

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
        pending_pods = {f"{c.namespace}/{c.pod}" for c in self.unresolved_claim_devices}
        held = {pid for pid, pair in pairs.items() if listed_at < seen[pair] or pair[1] in pending_pods}
        if not held:
            return attribution
        kept = {pid: ref for pid, ref in attribution.processes.items() if pid not in held}
        return dataclasses.replace(attribution, processes=MappingProxyType(kept))


def why_unhealthy(attribution: Attribution) -> str:
    """Which source an unhealthy attribution lacked, for the stage's status line ("" when healthy)."""
    reasons = []
    if not attribution.kubelet_ok:
        reasons.append("kubelet pod-resources unavailable")
    if not attribution.api_ok:
        reasons.append("pod metadata unavailable")
    return "; ".join(reasons)
