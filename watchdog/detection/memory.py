"""Memory pressure on a device several pods share (a time-sliced/MPS GPU or a MIG instance).

Pure (no I/O). GPU memory is not overcommittable: when a shared device runs out, the next allocation of *any* pod on
it fails, usually the one that did nothing wrong. So pressure is judged on the device's free memory (total − used −
reserved, NVML v2 memory info, nvml.h nvmlMemory_v2_t), entered below a threshold, left only above threshold + a band
(koordlet's memory eviction uses the same band idea: thr and thr−2, koordinator
pkg/koordlet/qosmanager/plugins/memoryevict/memory_evict.go), and only reported after it held `for_ticks` ticks. The
pods are ranked for relief the way the kubelet ranks pods under node memory pressure (usage above request first, then
lower priority, then usage above request; kubernetes/website node-pressure-eviction.md). The pod that grew is named
only when its growth is a real part of the deficit and it is above its request; a small allocation within a request
does not make a pod the cause of a neighbour sitting gigabytes above its own. A device that cannot be read keeps its
finding open, marked unobserved (`observed=False`, `last_tick` = the last reading), so nothing acts on a pressure
nobody can see any more.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from watchdog.config.detection import DetectionPolicy
from watchdog.detection.domain_types import Device
from watchdog.detection.rings import SlotRing
from watchdog.detection.runs import Runs
from watchdog.detection.view import POOLS, TickView
from watchdog.model import Attribution, Finding, FindingKind, PodRef, Severity


@dataclass(slots=True)
class _DeviceState:
    memory: SlotRing
    first_seen: dict[str, int] = field(default_factory=dict)  # pod key → tick it first appeared on the device
    last_seen: dict[str, int] = field(default_factory=dict)  # pod key → last tick it was on the device
    created: int = 0
    last_tick: int = 0
    finding: Finding | None = None


def _above_request(ref: PodRef, usage: dict[str, float], attribution: Attribution) -> bool:
    """Whether the pod uses more than its GPU memory request; True when no request is known (nothing to be within)."""
    info = attribution.pod(ref)
    request = info.gpu_memory_request_bytes if info else None
    return request is None or usage.get(ref.key, 0.0) > request


def relief_order(pods: tuple[PodRef, ...], usage: dict[str, float], attribution: Attribution) -> list[PodRef]:
    """Pods in the order the kubelet would evict them: above request first, then lower priority, then excess."""

    def rank(ref: PodRef) -> tuple[bool, int, float]:
        info = attribution.pod(ref)
        used = usage.get(ref.key, 0.0)
        request = (info.gpu_memory_request_bytes if info else None) or 0
        priority = info.priority if info else 0
        return (not used > request, priority, -(used - request))

    return sorted(pods, key=rank)


class MemoryPressureDetector:
    name = "memory_pressure"
    needs = frozenset({POOLS})

    def __init__(self, policy: DetectionPolicy, *, tenant_of: Callable[[PodRef], str]) -> None:
        self._policy = policy
        self._tenant_of = tenant_of
        self._runs = Runs()
        self._devices: dict[str, _DeviceState] = {}

    def set_policy(self, policy: DetectionPolicy) -> None:
        window = policy.memory_pressure.growth_window
        if window != self._policy.memory_pressure.growth_window:
            for state in self._devices.values():
                state.memory = state.memory.resized(window)
        self._policy = policy

    def step(self, view: TickView) -> list[Finding]:
        """Judge every memory pool of the tick (a split GPU instance is one, detection/pools.py)."""
        policy = self._policy.memory_pressure
        if not policy.enabled:
            self._devices.clear()
            self._runs = Runs()
            return []
        attribution, tick, timestamp = view.attribution, view.tick, view.timestamp
        findings: list[Finding] = []
        for device in view.pools or ():
            if len(device.pods) < 2 and attribution.healthy:
                self._devices.pop(device.uuid, None)
                self._runs.end(device.uuid)
                continue
            if device.memory_total is None or device.memory_used is None or len(device.pods) < 2:
                continue  # unreadable this tick (memory, or who is on it): keep whatever was open, unobserved
            state = self._devices.get(device.uuid)
            if state is None:
                state = self._devices[device.uuid] = _DeviceState(SlotRing(policy.growth_window), created=tick)
            state.last_tick = tick
            state.memory.advance()
            for ref in device.pods:
                state.first_seen.setdefault(ref.key, tick)
                state.last_seen[ref.key] = tick
                state.memory.set(ref.key, device.pod_memory.get(ref.key))
            self._forget_departed(state, tick=tick)
            state.finding = self._judge(device, state, attribution, tick=tick, timestamp=timestamp)
        for uuid, state in list(self._devices.items()):
            if tick - state.last_tick > policy.stale_ticks:
                del self._devices[uuid]
                self._runs.end(uuid)
            elif state.finding is not None:
                fresh = state.last_tick == tick
                findings.append(state.finding if fresh else replace(state.finding, observed=False))
        return findings

    def _forget_departed(self, state: _DeviceState, *, tick: int) -> None:
        """Pods gone from the device for `stale_ticks`: their ring row and arrival tick go (a return is new)."""
        stale = self._policy.memory_pressure.stale_ticks
        for key, seen in list(state.last_seen.items()):
            if tick - seen > stale:
                del state.last_seen[key]
                state.first_seen.pop(key, None)
                state.memory.forget(key)

    def _judge(
        self, device: Device, state: _DeviceState, attribution: Attribution, *, tick: int, timestamp: float
    ) -> Finding | None:
        policy = self._policy.memory_pressure
        total = device.memory_total or 0
        free = total - (device.memory_used or 0) - (device.memory_reserved or 0)
        threshold = max(policy.min_free_bytes, policy.min_free_ratio * total)
        band = max(policy.band_bytes, policy.band_ratio * total)
        run = self._runs.get(device.uuid)
        limit = threshold + band if run is not None and run.active else threshold
        if free >= limit:
            self._runs.end(device.uuid)
            return None
        run = self._runs.hold(device.uuid, tick=tick, timestamp=timestamp, for_ticks=policy.for_ticks)
        if not run.active:
            return None
        usage = {k: float(v) for k, v in device.pod_memory.items()}
        growth = {ref.key: self._growth(state, ref.key, tick=tick) for ref in device.pods}
        order = relief_order(device.pods, usage, attribution)
        needed = threshold + band - free
        grower = max(device.pods, key=lambda ref: growth[ref.key])
        meaningful = growth[grower.key] > 0 and growth[grower.key] >= policy.min_growth_share * needed
        culprit = grower if meaningful and _above_request(grower, usage, attribution) else order[0]
        victims = tuple(ref for ref in device.pods if ref.key != culprit.key)
        kind = "mig" if device.mig is not None else "timeslice"
        where = {}
        if device.compute_instances:  # a split GI's pool (pools.py): judged once, its CIs named
            kind = "gi"
            where = {"compute_instances": ",".join(device.compute_instances)}
        return Finding(
            kind=FindingKind.MEMORY_PRESSURE,
            key=f"memory_pressure/{kind}/{device.uuid.removeprefix('gi/')}",
            domain=device.uuid if device.compute_instances else f"{kind}/{device.uuid}",
            resource="memory",
            severity=Severity.CRITICAL,
            first_tick=run.first_tick,
            last_tick=tick,
            since=run.since,
            victims=victims,
            culprit=culprit,
            tenant=self._tenant_of(culprit),
            evidence={
                "free_bytes": int(free),
                "total_bytes": int(total),
                "threshold_bytes": int(threshold),
                "band_bytes": int(band),
                "culprit_growth_bytes": int(growth[culprit.key]),
                "window": policy.growth_window,
                "relief_order": ",".join(ref.key for ref in order),
                "ticks": run.ticks,
                **where,
            },
            usage=usage,
            needed=float(needed),
            message=f"{device.uuid}: {free / 2**20:.0f} MiB free of {total / 2**20:.0f} MiB; {culprit.key} "
            + ("grew most" if culprit.key == grower.key and meaningful else "ranks first for relief"),
            gpu_uuid=device.gpu.uuid,
            mig_uuid=device.uuid if device.mig is not None and not device.compute_instances else "",
        )

    def _growth(self, state: _DeviceState, pod: str, *, tick: int) -> float:
        """Bytes the pod added over the window; a pod that arrived within the window started from nothing."""
        window = state.memory.window(pod, state.memory.capacity)
        seen = window[np.isfinite(window)]
        if not seen.size:
            return 0.0
        first = state.first_seen.get(pod, tick)
        arrived_within = first > state.created and tick - first < state.memory.capacity
        start = 0.0 if arrived_within else float(seen[0])
        return float(seen[-1]) - start
