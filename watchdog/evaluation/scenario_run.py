"""Runs a scenario through the agent's real stages, in-process and deterministically, without Kubernetes.

Evaluation numbers only mean something if they come from the code that runs in the DaemonSet: the simulated node
answers NVML, and the real ``NvmlSampler`` samples it; the pod cache, the kubelet's assignments and /proc are built
from the scenario's pods (what the watch, the PodResources List and the cgroup reader would return), and the real
``attribute()`` joins them; then the real detector, rules and pacer run (``stages.OfflineAgent``). Only the HTTP and
gRPC hops are skipped. Xid events are drained with ``nvmlEventSetWait_v2(set, 0)`` on this thread after each
sample instead of by the watcher's thread, so a run never depends on thread timing. ``record --simulate`` uses
:func:`simulate` to write a trace from the same ticks.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Iterator, Mapping

from watchdog.attribution.join import attribute
from watchdog.config import Policy
from watchdog.evaluation.stages import OfflineAgent, StepResult
from watchdog.model import (NOT_ATTRIBUTABLE, Attribution, ContainerInfo, DeviceAssignment, NodeSample, PodIndex,
                            PodInfo, XidEvent)
from watchdog.sampling.sampler import NvmlSampler
from watchdog.testbed import Scenario, SimClock, SimulatedGpuNode, load_scenario
from watchdog.testbed.scenario import PodSpec, stable_digest

# nvml.h: nvmlEventTypeXidCriticalError | DoubleBitEcc | SingleBitEcc, as the device plugin registers them.
_EVENT_MASK = 0x8 | 0x2 | 0x1
_XID_BIT = 0x8
_PRE_EXISTING_AGE_SECONDS = 3600.0  # a pod present from tick 0 was created well before the scenario began


def container_id(pod: PodSpec) -> str:
    """A stable runtime ID for the pod's GPU container (what /proc/<pid>/cgroup would name)."""
    return stable_digest("container", pod.uid, pod.container).hex()


def pod_info(pod: PodSpec, scenario: Scenario) -> PodInfo:
    """What the pod watch would hold for a scenario pod."""
    created = pod.start_tick * scenario.tick_seconds - (_PRE_EXISTING_AGE_SECONDS if pod.start_tick == 0 else 0.0)
    return PodInfo(
        uid=pod.uid or "",
        namespace=pod.namespace,
        name=pod.name,
        node=scenario.node,
        labels=MappingProxyType(dict(pod.labels)),
        annotations=MappingProxyType(dict(pod.annotations)),
        priority=pod.priority,
        priority_class=pod.priority_class,
        qos_class=pod.qos_class,
        owner_kind=pod.owner_kind,
        mirror=pod.owner_kind == "Node",
        created=created,
        containers=(ContainerInfo(pod.container, container_id(pod)),),
        gpu_memory_request_bytes=pod.gpu_memory_request_bytes,
        gpu_resources=_requested_resources(pod, scenario),
    )


def _requested_resources(pod: PodSpec, scenario: Scenario) -> tuple[str, ...]:
    # The device plugin's resource names: nvidia.com/gpu, or nvidia.com/mig-<profile> under the mixed strategy.
    if pod.device is None:
        return ()
    profiles = scenario.gpus[pod.device.gpu].mig
    if profiles is None or pod.device.instance is None:
        return ("nvidia.com/gpu",)
    return (f"nvidia.com/mig-{profiles[pod.device.instance]}",)


class _EventDrain:
    """Reads every Xid the node has raised so far, without blocking (timeout 0)."""

    def __init__(self, nvml: Any, handles: list[tuple[int, str, Any]]) -> None:
        self._nvml = nvml
        self._index_by_uuid = {uuid: index for index, uuid, _ in handles}
        self._set = nvml.nvmlEventSetCreate()
        for _, _, handle in handles:
            nvml.nvmlDeviceRegisterEvents(handle, _EVENT_MASK, self._set)

    def drain(self, now: float) -> tuple[XidEvent, ...]:
        events = []
        while True:
            try:
                data = self._nvml.nvmlEventSetWait_v2(self._set, 0)
            except self._nvml.NVMLError:
                break  # Timeout: nothing more; GpuIsLost: the sampler reports the lost GPU itself
            uuid = self._nvml.nvmlDeviceGetUUID(data.device)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            gi, ci = int(data.gpuInstanceId), int(data.computeInstanceId)
            events.append(XidEvent(
                gpu_index=self._index_by_uuid.get(uuid, -1),
                gpu_uuid=uuid,
                xid=int(data.eventData) if int(data.eventType) & _XID_BIT else 0,
                event_type=int(data.eventType),
                timestamp=now,
                gpu_instance=None if gi == NOT_ATTRIBUTABLE else gi,
                compute_instance=None if ci == NOT_ATTRIBUTABLE else ci,
            ))
        return tuple(events)

    def close(self) -> None:
        self._nvml.nvmlEventSetFree(self._set)


def _assignments(node: SimulatedGpuNode) -> list[DeviceAssignment]:
    rows = []
    for row in node.assignments():
        device_id, _, replica = row.device_id.partition("::")
        rows.append(DeviceAssignment(device_id=device_id, resource=row.resource, namespace=row.namespace,
                                     pod=row.pod, container=row.container,
                                     replica=int(replica) if replica else None))
    return rows


def simulate(scenario: Scenario | str, *, tenant_label: str | None = None) -> Iterator[tuple[NodeSample, Attribution]]:
    """(sample, attribution) for ticks 0 … duration_ticks − 1 of the scenario, through the real sampler and join."""
    scenario = load_scenario(scenario)
    clock = SimClock()
    node = SimulatedGpuNode(scenario, clock)
    sampler = NvmlSampler(node.nvml, node=scenario.node, clock=clock.now)
    sampler.open()
    events = _EventDrain(node.nvml, sampler.gpu_handles())
    infos: Mapping[str, PodInfo] = {pod.uid or "": pod_info(pod, scenario) for pod in scenario.pods}
    index = PodIndex(tenant_label=tenant_label)  # rebuilt when the running pods change, as the agent's cache does
    try:
        for tick in range(scenario.duration_ticks):
            node.promote_scheduled_errors()
            sample = sampler.sample(tick)
            xids = events.drain(clock.now())
            if xids:
                sample = NodeSample(node=sample.node, tick=sample.tick, timestamp=sample.timestamp, gpus=sample.gpus,
                                    xids=xids, driver_version=sample.driver_version)
            running = {pod.uid: infos[pod.uid or ""] for pod in scenario.pods if pod.running(tick)}
            if running.keys() != index.pods.keys():
                index = PodIndex(running, tenant_label=tenant_label)
            by_uid = {pod.uid: pod for pod in scenario.pods}
            proc = {row.pid: (row.pod_uid, container_id(by_uid[row.pod_uid])) for row in node.processes()}
            attribution = attribute(sample, assignments=_assignments(node), index=index,
                                    proc=proc, kubelet_ok=True, api_ok=True)
            yield sample, attribution
            clock.advance(scenario.tick_seconds)
    finally:
        events.close()
        sampler.close()
        node.close()


def run_scenario(scenario: Scenario | str, *, policy: Policy) -> Iterator[StepResult]:
    """Each tick's sample, attribution, findings and decisions (see ``stages.StepResult``)."""
    agent = OfflineAgent(policy)
    for sample, attribution in simulate(scenario, tenant_label=policy.action.tenant_label):
        yield agent.step(sample, attribution)
