"""Xid faults: what each one means for the pods on that GPU (or GPU instance), and for how long to say so.

Pure (no I/O). An Xid is an event, not a level, so a finding about one stays open `hold_seconds` after its last
occurrence and counts repeats (dcgm-exporter's "last value" gauge that never resets is the complaint we avoid:
DCGM_FI_DEV_XID_ERRORS in its etc/default-counters.csv). The class comes from the driver's own verdict when the
event carries one (nvml.h: field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, 230, and the nvmlEventTypeGpuRecoveryAction
event), in both directions: a recovery action means reset, NONE means the
GPU keeps serving whatever our lists say; without a verdict the policy's lists decide. Scope: NVML events carry the
GPU and compute instance when the fault is attributable, so on MIG only the pods of that instance are named (the
k8s-device-plugin marks only the matching MIG device in that case, internal/rm/health.go); otherwise every pod of
the GPU is. A GPU that fell off the bus (Xid 79) is sampled as lost and has no devices, so its pods then come from
the kubelet's assignments of its UUID and of the MIG UUIDs it had when last seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Callable, Sequence

from watchdog.config.detection import DetectionPolicy, XidDetectionPolicy
from watchdog.detection.domain_types import Device
from watchdog.detection.view import TickView
from watchdog.model import Attribution, Finding, FindingKind, PodRef, Severity, XidEvent

# nvmlEventType* bits (nvml.h).
EVENT_SINGLE_BIT_ECC = 0x1
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_XID = 0x8
EVENT_MIG_CONFIG_CHANGE = 0x100
EVENT_NON_FATAL_POISON = 0x1000
EVENT_FATAL_POISON = 0x2000
EVENT_GPU_UNAVAILABLE = 0x4000
EVENT_RECOVERY_ACTION = 0x8000

# NVML_GPU_RECOVERY_ACTION_* (nvml.h API v13, nvmlDeviceGpuRecoveryAction_t).
RECOVERY_ACTIONS = {0: "none", 1: "gpu_reset", 2: "node_reboot", 3: "drain_p2p", 4: "drain_and_reset"}


class XidClass(StrEnum):
    APPLICATION = "application"  # the application's own fault: nothing wrong with the GPU
    CONTAINED = "contained"  # killed only the affected application; the GPU keeps serving
    RESET = "reset"  # the GPU needs a reset or the node a drain
    UNKNOWN = "unknown"  # not in any list: reported as a warning
    IGNORED = "ignored"  # not a fault (SBE, MIG reconfiguration) or ignored by policy


def classify(event: XidEvent, policy: XidDetectionPolicy) -> tuple[XidClass, str]:
    """The event's class and the recovery it calls for; the driver's verdict wins over our lists."""
    verdict = event.recovery_action  # None until the sampler reads NVML field 230 / the GpuRecoveryAction event
    if verdict is not None and verdict != 0:
        return XidClass.RESET, RECOVERY_ACTIONS.get(verdict, f"action_{verdict}")
    fault = event.event_type & (EVENT_DOUBLE_BIT_ECC | EVENT_FATAL_POISON | EVENT_GPU_UNAVAILABLE)
    fault |= event.event_type & EVENT_NON_FATAL_POISON
    if verdict == 0 and (fault or (event.xid > 0 and event.xid not in policy.ignore)):
        # NVML_GPU_RECOVERY_ACTION_NONE: the driver says the GPU needs nothing; our reset list must not overrule it.
        if event.xid in policy.application:
            return XidClass.APPLICATION, "none"
        return XidClass.CONTAINED, "none"
    if event.event_type & (EVENT_DOUBLE_BIT_ECC | EVENT_FATAL_POISON | EVENT_GPU_UNAVAILABLE):
        return XidClass.RESET, "gpu_reset"
    if event.event_type & EVENT_NON_FATAL_POISON:
        return XidClass.CONTAINED, "restart_app"
    if event.xid <= 0 or event.xid in policy.ignore:
        return XidClass.IGNORED, "none"  # SBE, MIG config change, recovery events without a verdict
    if event.xid in policy.reset:
        return XidClass.RESET, "gpu_reset"
    if event.xid in policy.contained:
        return XidClass.CONTAINED, "restart_app"
    if event.xid in policy.application:
        return XidClass.APPLICATION, "none"
    return XidClass.UNKNOWN, "none"


@dataclass(slots=True)
class _Open:
    first_tick: int
    since: float
    last_tick: int
    last_event: float
    count: int
    event: XidEvent
    xid_class: XidClass
    action: str
    pods: tuple[PodRef, ...]  # scope as attributed when the (latest) event arrived


class XidDetector:
    name = "xid"
    needs: frozenset[str] = frozenset()  # the tick's devices narrow an event's scope when they could be built

    def __init__(self, policy: DetectionPolicy, *, tenant_of: Callable[[PodRef], str]) -> None:
        self._policy = policy.xid
        self._tenant_of = tenant_of
        self._open: dict[str, _Open] = {}
        self._layout: dict[str, dict[str, tuple[int, int]]] = {}  # GPU UUID → MIG UUID → (GI, CI), as last seen
        self._uuids: dict[int, str] = {}  # GPU index → UUID, as last seen

    def set_policy(self, policy: DetectionPolicy) -> None:
        self._policy = policy.xid

    def step(self, view: TickView) -> list[Finding]:
        """The tick's Xid events, scoped to the pods of the faulting device; each open for ``hold_seconds``."""
        policy = self._policy
        sample, attribution, devices = view.sample, view.attribution, view.devices or ()
        if not policy.enabled:
            self._open.clear()
            return []
        for gpu in sample.gpus:
            self._uuids[gpu.index] = gpu.uuid
            if not gpu.lost:  # a lost GPU reports no instances: keep the layout it had
                self._layout[gpu.uuid] = {m.uuid: (m.gpu_instance, m.compute_instance) for m in gpu.instances}
        for event in sample.xids:
            xid_class, action = classify(event, policy)
            if xid_class is XidClass.IGNORED:
                continue
            scope = "gpu" if event.gpu_instance is None else f"gi{event.gpu_instance}"
            key = f"xid/{event.gpu_uuid}/{scope}/{event.xid}"
            pods = _scope(event, devices) or self._assigned(event, attribution)
            current = self._open.get(key)
            if current is None:
                self._open[key] = _Open(
                    sample.tick, event.timestamp, sample.tick, event.timestamp, 1, event, xid_class, action, pods
                )
            else:
                current.count += 1
                current.last_tick, current.last_event, current.event = sample.tick, event.timestamp, event
                current.xid_class, current.action = xid_class, action
                current.pods = pods or current.pods
        findings = []
        for key, state in list(self._open.items()):
            if sample.timestamp - state.last_event > policy.hold_seconds:
                del self._open[key]
                continue
            findings.append(self._finding(key, state))
        return findings

    def _assigned(self, event: XidEvent, attribution: Attribution) -> tuple[PodRef, ...]:
        """The pods the kubelet assigned the event's GPU (or its faulting instance): the scope of a lost GPU."""
        gpu_uuid = event.gpu_uuid or self._uuids.get(event.gpu_index, "")
        layout = self._layout.get(gpu_uuid, {})
        if event.gpu_instance is None:
            uuids = [gpu_uuid, *layout]
        else:  # like `_scope`: the instance's compute instance when it names one we know, else the whole instance
            uuids = [u for u, (gi, _) in layout.items() if gi == event.gpu_instance]
            narrowed = [u for u in uuids if layout[u][1] == event.compute_instance]
            uuids = narrowed or uuids
        seen: dict[str, PodRef] = {}
        for uuid in uuids:
            for ref in attribution.devices.get(uuid, ()):
                seen.setdefault(ref.key, ref)
        return tuple(seen.values())

    def _finding(self, key: str, state: _Open) -> Finding:
        event, pods = state.event, state.pods
        culprit = None
        if state.xid_class in (XidClass.APPLICATION, XidClass.CONTAINED) and event.gpu_instance is not None:
            culprit = pods[0] if len(pods) == 1 else None  # the faulting application, when it is unambiguous
        victims = tuple(ref for ref in pods if culprit is None or ref.key != culprit.key)
        action = state.action
        if self._policy.drain and state.xid_class is XidClass.RESET:
            action = "drain"
        tenants = {self._tenant_of(ref) for ref in pods}
        severity = Severity.CRITICAL if state.xid_class is XidClass.RESET else Severity.WARNING
        gi = "" if event.gpu_instance is None else f"/{event.gpu_instance}"
        return Finding(
            kind=FindingKind.XID,
            key=key,
            domain=f"gi/{event.gpu_uuid}{gi}" if gi else f"gpu/{event.gpu_uuid}",
            resource="xid",
            severity=severity,
            first_tick=state.first_tick,
            last_tick=state.last_tick,
            since=state.since,
            victims=victims,
            culprit=culprit,
            tenant=self._tenant_of(culprit) if culprit else (tenants.pop() if len(tenants) == 1 else None),
            evidence={
                "xid": event.xid,
                "class": state.xid_class.value,
                "action": action,
                "count": state.count,
                "gpu_index": event.gpu_index,
                "gpu_uuid": event.gpu_uuid,
                "gpu_instance": -1 if event.gpu_instance is None else event.gpu_instance,
                "compute_instance": -1 if event.compute_instance is None else event.compute_instance,
                "event_type": event.event_type,
                "last_event": event.timestamp,
            },
            message=f"Xid {event.xid} ({state.xid_class.value}) on {event.gpu_uuid}{gi} x{state.count}: {action}",
            gpu_uuid=event.gpu_uuid,  # a GPU instance can hold several MIG devices: no single mig_uuid
        )


def _scope(event: XidEvent, devices: Sequence[Device]) -> tuple[PodRef, ...]:
    """The pods of the faulting GPU instance (compute instance when known), else of the whole GPU."""
    if event.gpu_uuid:
        on_gpu = [d for d in devices if d.gpu.uuid == event.gpu_uuid]
    else:
        on_gpu = [d for d in devices if d.gpu.index == event.gpu_index]
    if event.gpu_instance is not None:
        on_gpu = [d for d in on_gpu if d.mig is not None and d.mig.gpu_instance == event.gpu_instance]
        if event.compute_instance is not None:
            narrowed = [d for d in on_gpu if d.mig is not None and d.mig.compute_instance == event.compute_instance]
            on_gpu = narrowed or on_gpu
    seen: dict[str, PodRef] = {}
    for device in on_gpu:
        for ref in device.pods:
            seen.setdefault(ref.key, ref)
    return tuple(seen.values())
