"""Runs a scenario through the agent's real stages, in-process and deterministically, without Kubernetes.

Evaluation numbers only mean something if they come from the code that runs in the DaemonSet: the simulated node
answers NVML, and the real ``NvmlSampler`` samples it; the pod cache, the kubelet's assignments and /proc are built
from the scenario's pods (what the watch, the PodResources List and the cgroup reader would return), and the real
``attribute()`` joins them (on a DRA node, the kubelet's claim tuples go through the real
``resolve_claim_devices`` against the slice the driver would have published, and a pod whose claimed device no
slice names yet has its processes held back as the agent does), with each GPU's sharing from what the device plugin
advertises and GFD labels, and each vGPU's VMI from the VMIs and virt-launcher pods the world publishes
(testbed/cluster/kubevirt.py) through the agent's own parsers and ``attribution.vgpus``; then the real detector, rules and pacer run
(``stages.OfflineAgent``). Only the HTTP and gRPC hops are skipped. Xid events are drained with
``nvmlEventSetWait_v2(set, 0)`` on this thread after each sample instead of by the watcher's thread, so a run
never depends on thread timing. ``record --simulate`` uses
:func:`simulate` to write a trace from the same ticks.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping, NamedTuple

from watchdog.attribution.join import attribute, resolve_claim_devices, unassigned_processes
from watchdog.attribution.proc import MPS_SERVER_COMMANDS
from watchdog.attribution.sharing import count_replicas, device_sharing, shareable_gpus
from watchdog.attribution.vgpus import vgpu_owners, vmis_by_uid
from watchdog.config import Policy
from watchdog.evaluation.stages import OfflineAgent, StepResult
from watchdog.model import (NOT_ATTRIBUTABLE, Attribution, ClaimDevice, ClaimRef, ContainerInfo, DeviceAssignment,
                            DeviceSharing, HostProcess, InstanceActivity, NodeSample, PodIndex, PodInfo, XidEvent)
from watchdog.sampling.sampler import NvmlSampler
from watchdog.kube.pods import pod_info as api_pod_info
from watchdog.kube.vmis import vmi_info
from watchdog.testbed import Scenario, SimClock, SimulatedGpuNode, load_scenario
from watchdog.testbed.cluster.kubevirt import running_objects
from watchdog.testbed.cluster.device_plugin import advertised_devices, gfd_labels
from watchdog.testbed.cluster.dra import SliceLag, claim_uses, dra_devices, slice_index
from watchdog.testbed.monitoring import LatencySignals, dcgm_activity
from watchdog.testbed.scenario import stable_digest
from watchdog.testbed.scenario_parts import PodSpec, mig_device_profiles

# nvml.h: nvmlEventTypeXidCriticalError | DoubleBitEcc | SingleBitEcc, as the device plugin registers them.
_EVENT_MASK = 0x8 | 0x2 | 0x1
_XID_BIT = 0x8
# nvml.h nvmlEventMigConfigChange: a GPU or compute instance was created or destroyed (a DRA driver creating a MIG
# device at claim time). The agent's event thread re-enumerates on it (sampling.xid_watcher); so does the drain.
_MIG_CONFIG_CHANGE = 0x100
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
    if pod.device is None or pod.claim is not None:  # a DRA pod asks through its claim, not a resource
        return ()
    layout = scenario.gpus[pod.device.gpu].mig
    if layout is None or pod.device.instance is None:
        return ("nvidia.com/gpu",)
    profiles = mig_device_profiles(scenario.gpus[pod.device.gpu].model, layout)  # every CI of a split GI
    if pod.device.instance >= len(profiles):  # an instance a later reconfiguration creates
        return ()
    return (f"nvidia.com/mig-{profiles[pod.device.instance]}",)


class _EventDrain:
    """Reads every Xid the node has raised so far, without blocking (timeout 0)."""

    def __init__(self, nvml: Any, handles: list[tuple[int, str, Any]],
                 on_mig_change: Callable[[int], None] | None = None) -> None:
        self._nvml = nvml
        self._on_mig_change = on_mig_change
        self._index_by_uuid = {uuid: index for index, uuid, _ in handles}
        self._set = nvml.nvmlEventSetCreate()
        for _, _, handle in handles:
            nvml.nvmlDeviceRegisterEvents(handle, _EVENT_MASK | (_MIG_CONFIG_CHANGE if on_mig_change else 0),
                                          self._set)

    def drain(self, now: float) -> tuple[XidEvent, ...]:
        events = []
        while True:
            try:
                data = self._nvml.nvmlEventSetWait_v2(self._set, 0)
            except self._nvml.NVMLError:
                break  # Timeout: nothing more; GpuIsLost: the sampler reports the lost GPU itself
            uuid = self._nvml.nvmlDeviceGetUUID(data.device)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            if int(data.eventType) & _MIG_CONFIG_CHANGE:
                self._on_mig_change(self._index_by_uuid.get(uuid, -1))
                continue
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
    claimed = {pod.key for pod in node.scenario.pods if pod.claim is not None}
    for row in node.assignments():
        if f"{row.namespace}/{row.pod}" in claimed:
            continue  # through DRA (_claimed_assignments)
        device_id, _, replica = row.device_id.partition("::")
        rows.append(DeviceAssignment(device_id=device_id, resource=row.resource, namespace=row.namespace,
                                     pod=row.pod, container=row.container,
                                     replica=int(replica) if replica else None))
    return rows


def _claimed_assignments(scenario: Scenario, node: SimulatedGpuNode, lag: SliceLag,
                         sample: NodeSample) -> tuple[tuple[DeviceAssignment, ...], set[str]]:
    """A DRA node's assignments (the device plugin's, then the claims' as the agent resolves them), and the pods
    whose claimed device no slice names yet."""
    assert scenario.dra is not None
    driver, pool, tick = scenario.dra.driver, scenario.node, node.tick
    devices = dra_devices(node, tick)
    index = slice_index(driver=driver, pool=pool, devices=devices, published=lag.published(tick, devices))
    claimed = [ClaimDevice(driver=driver, pool=pool, device=use.device, claim=ClaimRef(use.namespace, use.claim),
                           namespace=use.namespace, pod=use.pod, container=use.container)
               for use in claim_uses(scenario, node, tick)]
    plugin = _assignments(node)
    resolved, unresolved = resolve_claim_devices(claimed, index, sample=sample, taken=[a.device_id for a in plugin])
    return (*plugin, *resolved), {f"{c.namespace}/{c.pod}" for c in unresolved}


class _Sharing:
    """``Attribution.sharing`` as the agent builds it (attribution/sharing.py), from what the device plugin
    advertises and GFD labels (testbed/cluster/device_plugin.py) instead of the kubelet and the API server; computed
    again only when the sample's whole GPUs or the advertised devices change."""

    def __init__(self, node: SimulatedGpuNode) -> None:
        self._node = node
        self._labels = gfd_labels(node.scenario)
        self._inputs: tuple = ()
        self._last: Mapping[str, DeviceSharing] = MappingProxyType({})

    def at(self, sample: NodeSample) -> Mapping[str, DeviceSharing]:
        gpus = shareable_gpus(sample)
        counts = count_replicas(i for ids in advertised_devices(self._node).values() for i in ids)
        if (gpus, counts) != self._inputs:
            self._inputs = (gpus, counts)
            self._last = device_sharing(gpus, kubelet=counts, labels=self._labels)
        return self._last


class ObservedTick(NamedTuple):
    """One simulated tick as the agent would see it: NVML's sample, the join, and what the cluster's monitoring
    hands in (the tenants' latency signals and dcgm-exporter's per-instance activity; None when not simulated)."""

    sample: NodeSample
    attribution: Attribution
    signals: Mapping[str, float] | None
    activity: Mapping[str, InstanceActivity] | None


def simulate(scenario: Scenario | str, *, tenant_label: str | None = None) -> Iterator[tuple[NodeSample, Attribution]]:
    """(sample, attribution) for ticks 0 … duration_ticks − 1 of the scenario, through the real sampler and join."""
    for observed in simulate_observed(scenario, tenant_label=tenant_label):
        yield observed.sample, observed.attribution


def simulate_observed(scenario: Scenario | str, *, tenant_label: str | None = None) -> Iterator[ObservedTick]:
    """Each tick of the scenario with what its monitoring (scenario ``monitoring``) reports besides NVML."""
    scenario = load_scenario(scenario)
    clock = SimClock()
    node = SimulatedGpuNode(scenario, clock)
    sampler = NvmlSampler(node.nvml, node=scenario.node, clock=clock.now)
    sampler.open()
    events = _EventDrain(node.nvml, sampler.gpu_handles(), on_mig_change=sampler.request_enumeration)
    infos: Mapping[str, PodInfo] = {pod.uid or "": pod_info(pod, scenario) for pod in scenario.pods}
    index = PodIndex(tenant_label=tenant_label)  # rebuilt when the running pods change, as the agent's cache does
    lag = SliceLag(scenario.dra.slice_lag_ticks) if scenario.dra is not None else None
    latency = LatencySignals(node) if scenario.monitoring.latency else None
    sharing = _Sharing(node)
    try:
        for tick in range(scenario.duration_ticks):
            node.promote_scheduled_errors()
            sample = sampler.sample(tick)
            xids = events.drain(clock.now())
            if xids:  # as the live cycle does: the events join the sample through the same gate
                sample = sampler.gate.admit(dataclasses.replace(sample, xids=sample.xids + tuple(xids)))
            running = {pod.uid: infos[pod.uid or ""] for pod in scenario.pods if pod.running(tick)}
            # A vGPU host's VMs: the VMIs the agent lists and their virt-launcher pods in the pod cache.
            kubevirt = running_objects(scenario, tick)
            vmis = [vmi_info(vmi) for vmi, _ in kubevirt]
            running.update((info.uid, info) for info in (api_pod_info(pod) for _, pod in kubevirt))
            if running.keys() != index.pods.keys():
                index = PodIndex(running, tenant_label=tenant_label)
            by_uid = {pod.uid: pod for pod in scenario.pods}
            rows = node.processes()
            proc = {row.pid: (row.pod_uid, container_id(by_uid[row.pod_uid])) for row in rows if not row.cgroup}
            hosts = {row.pid: HostProcess(cgroup=row.cgroup, command=row.command) for row in rows if row.cgroup}
            # The /proc reader's rule, by comm: the MPS server is infrastructure (attribution.proc).
            infrastructure = frozenset(row.pid for row in rows if row.command in MPS_SERVER_COMMANDS)
            pending: set[str] = set()
            if lag is None:
                assignments: tuple[DeviceAssignment, ...] | list[DeviceAssignment] = _assignments(node)
            else:
                assignments, pending = _claimed_assignments(scenario, node, lag, sample)
            attribution = attribute(sample, assignments=assignments, index=index,
                                    proc=proc, api_ok=True, hosts=hosts, infrastructure=infrastructure,
                                    kubelet_ok=not any(o.covers(tick) for o in scenario.kubelet_outages),
                                    sharing=sharing.at(sample))
            if pending:
                held = {pid for pid, (_, key) in unassigned_processes(sample, attribution).items() if key in pending}
                kept = {pid: ref for pid, ref in attribution.processes.items() if pid not in held}
                attribution = dataclasses.replace(attribution, processes=MappingProxyType(kept))
            if vmis:
                attribution = dataclasses.replace(attribution, vgpus=vgpu_owners(sample, vmis, index),
                                                  vmis=vmis_by_uid(vmis))
            yield ObservedTick(sample, attribution, latency.at(tick) if latency is not None else None,
                               dcgm_activity(node, tick) if scenario.monitoring.dcgm_exporter else None)
            clock.advance(scenario.tick_seconds)
    finally:
        events.close()
        sampler.close()
        node.close()


def run_scenario(scenario: Scenario | str, *, policy: Policy) -> Iterator[StepResult]:
    """Each tick's sample, attribution, findings and decisions (see ``stages.StepResult``)."""
    scenario = load_scenario(scenario)
    agent = OfflineAgent(policy, tick_seconds=scenario.tick_seconds)
    for tick in simulate_observed(scenario, tenant_label=policy.action.tenant_label):
        yield agent.step(tick.sample, tick.attribution, tick.signals, borrowed_activity=tick.activity)
