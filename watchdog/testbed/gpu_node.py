"""A simulated GPU node: the scenario brought to life behind a pynvml-shaped module object.

The node owns everything that is *not* a pure function of time — GPU losses, MIG reconfigurations, injected
errors, event sets — and asks :func:`watchdog.testbed.tick_state.compute_tick` for everything that is, caching the result
per tick. Tests and the demo drive it through the injected :class:`SimClock` and the fault methods below; the
sampler only ever sees ``node.nvml``, exactly as it would see real ``pynvml``.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import NamedTuple

from watchdog.model import NOT_ATTRIBUTABLE
from watchdog.testbed import mps
from watchdog.testbed.clock import SimClock
from watchdog.testbed.contention import GpuSharing
from watchdog.testbed.curves import CurveEvaluator
from watchdog.testbed.nvml.event_sets import EventHub
from watchdog.testbed.nvml.module import SimulatedNvml
from watchdog.testbed.profiles import GPU_MODELS, place_instances
from watchdog.testbed.scenario import Scenario, format_uuid, load_scenario, stable_digest
from watchdog.testbed.scenario_parts import layout_entries
from watchdog.testbed.tick_state import MIB, GpuLayout, InstanceLayout, TickState, WorkloadSource, compute_tick
from watchdog.testbed.vgpu_scheduling import VmLoad, vm_loads

EVENT_XID = 0x8  # nvmlEventTypeXidCriticalError
EVENT_MIG_CONFIG_CHANGE = 0x100  # nvmlEventMigConfigChange
_STATE_CACHE_TICKS = 128


class SimProcess(NamedTuple):
    pid: int
    namespace: str
    pod: str
    pod_uid: str
    container: str
    device_uuid: str
    command: str = ""  # set for a process in no pod (scenario host_processes), with its cgroup path
    cgroup: str = ""


class SimAssignment(NamedTuple):
    """What the kubelet's PodResources List would report for one container's device."""

    namespace: str
    pod: str
    container: str
    resource: str  # "nvidia.com/gpu" or "nvidia.com/mig-<profile>"
    device_id: str  # GPU/MIG UUID, with "::<n>" for a time-slicing replica


class SimDevice(NamedTuple):
    gpu_index: int
    uuid: str
    name: str
    model: str
    mig_profile: str | None = None
    instance: int | None = None  # index into the GPU's current mig list
    slot: int | None = None
    gpu_instance: int | None = None
    compute_instance: int | None = None
    replicas: int | None = None


@dataclass(slots=True)
class ErrorRule:
    function: str
    code: int
    device_index: int | None
    remaining: int | None  # None: forever


class SimulatedGpuNode:
    """One node of GPUs following a scenario; see docs/scenario-format.md."""

    def __init__(self, scenario: Scenario, clock: SimClock) -> None:
        self.scenario = scenario
        self.clock = clock
        self.models = [GPU_MODELS[gpu.model] for gpu in scenario.gpus]
        self.power_limits = [gpu.power_limit_watts or model.power_limit_watts
                             for gpu, model in zip(scenario.gpus, self.models)]
        self.gpu_uuids = ["GPU-" + format_uuid(stable_digest(scenario.seed, "gpu", index))
                          for index in range(len(scenario.gpus))]
        # nvmlDevice{Compute,MPSCompute,Graphics}RunningProcesses → NVMLLibraryMismatchError (a driver without _v3)
        self.compute_processes_v3_missing = False
        self.clock_event_reasons_missing = False  # nvmlDeviceGetCurrentClocksEventReasons → FunctionNotFound
        self.error_rules: list[ErrorRule] = []
        self._scheduled_errors = sorted((f for f in scenario.faults if f.error is not None), key=lambda f: f.at)
        self._lost_at: dict[int, int] = {f.gpu: f.at for f in sorted(scenario.faults, key=lambda f: -f.at) if f.lost}
        self._changes: dict[int, list[tuple[int, list[str]]]] = {}  # gpu → [(tick, profiles)], by tick
        self._layouts: dict[tuple[int, int], GpuLayout] = {}
        self._states: OrderedDict[int, TickState] = OrderedDict()
        self._sources = self._workload_sources()
        self._sharing = [GpuSharing(scheduler=gpu.scheduler,
                                    switch_overhead=0.0 if gpu.mps else gpu.context_switch_overhead,
                                    mps_replicas=gpu.replicas if gpu.mps else None,
                                    vgpu_scheduler=gpu.vgpu.scheduler if gpu.vgpu is not None else None)
                         for gpu in scenario.gpus]
        self.vm_loads = vm_loads(scenario)  # the vGPU hosts' VMs (testbed/vgpu_scheduling.py)
        taken = {pod.pid for pod in scenario.pods} | {host.pid for host in scenario.host_processes}
        self.mps_servers = {index: mps.server_pid(scenario.seed, index, taken)  # type: ignore[arg-type]
                            for index, gpu in enumerate(scenario.gpus) if gpu.mps}
        self.events = EventHub(current_tick=lambda: self.tick, resolve_instance=self._resolve_instance,
                               is_lost=lambda gpu: self.is_lost(gpu))
        for xid in scenario.xids:
            self.events.schedule(tick=xid.at, gpu=xid.gpu, event_type=EVENT_XID, data=xid.xid, instance=xid.instance)
        for fault in scenario.faults:
            if fault.mig is not None:
                self._add_change(fault.gpu, fault.at, list(fault.mig))
        self._unsubscribe = clock.subscribe(lambda _now: self.events.notify())
        self.nvml = SimulatedNvml(self)

    @classmethod
    def from_scenario(cls, scenario: Scenario | str | dict, clock: SimClock | None = None) -> SimulatedGpuNode:
        return cls(load_scenario(scenario), clock if clock is not None else SimClock())

    def close(self) -> None:
        """Stop listening to the clock (the node can be dropped afterwards)."""
        self._unsubscribe()

    # ------------------------------------------------------------------------------------------------ time

    @property
    def tick(self) -> int:
        # The epsilon absorbs float error of repeated advance(0.1) so tick boundaries land where expected.
        return max(0, math.floor(self.clock.elapsed() / self.scenario.tick_seconds + 1e-9))

    def state(self, tick: int | None = None) -> TickState:
        """The whole node at ``tick`` (default: now), computed once and cached."""
        tick = self.tick if tick is None else tick
        cached = self._states.get(tick)
        if cached is None:
            cached = compute_tick(tick, models=self.models, limits=self.power_limits, gpu_uuids=self.gpu_uuids,
                                  layouts=[self.layout(gpu, tick) for gpu in range(len(self.models))],
                                  sources=self._sources, sharing=self._sharing, vms=self._vms_here())
            self._states[tick] = cached
            if len(self._states) > _STATE_CACHE_TICKS:
                self._states.popitem(last=False)
        return cached

    def _vms_here(self) -> list[VmLoad]:
        """The vGPU hosts' VMs still served here: a VM KubeVirt live-migrated away (``migrated_vms``, set by
        testbed/cluster/kubevirt.py) no longer loads this node's GPU."""
        moved = getattr(self, "migrated_vms", ())
        return [vm for vm in self.vm_loads if (vm.spec.namespace, vm.spec.name) not in moved] if moved else self.vm_loads

    # ----------------------------------------------------------------------------------------------- layout

    def generation(self, gpu: int, tick: int) -> int:
        changes = self._changes.get(gpu)
        if not changes:
            return 0
        return sum(1 for at, _ in changes if at <= tick)

    def layout(self, gpu: int, tick: int | None = None) -> GpuLayout:
        tick = self.tick if tick is None else tick
        generation = self.generation(gpu, tick)
        cached = self._layouts.get((gpu, generation))
        if cached is None:
            profiles = self.scenario.gpus[gpu].mig
            if generation:
                profiles = self._changes[gpu][generation - 1][1]
            cached = self._layouts[(gpu, generation)] = self._build_layout(gpu, generation, profiles)
        return cached

    def _build_layout(self, gpu: int, generation: int, profiles: list[str] | None) -> GpuLayout:
        if profiles is None:
            return GpuLayout(index=gpu, generation=generation, mig_enabled=False)
        model = self.models[gpu]
        instances = []
        for index, placement in enumerate(place_instances(model, layout_entries(profiles))):
            uuid = "MIG-" + format_uuid(stable_digest(self.scenario.seed, self.gpu_uuids[gpu], generation,
                                                      placement.slot))
            instances.append(InstanceLayout(
                index=index, slot=placement.slot, gpu_instance=placement.gpu_instance,
                compute_instance=placement.compute_instance, profile=placement.profile, uuid=uuid,
                memory_total=placement.profile.memory_slices * model.memory_slice_mib * MIB,
                sm_share=placement.profile.sms / model.sms, gi_compute_instances=placement.gi_compute_instances))
        return GpuLayout(index=gpu, generation=generation, mig_enabled=True, instances=tuple(instances),
                         by_slot={instance.slot: instance for instance in instances})

    def _add_change(self, gpu: int, tick: int, profiles: list[str]) -> None:
        changes = self._changes.setdefault(gpu, [])
        changes.append((tick, profiles))
        changes.sort(key=lambda change: change[0])
        self.events.schedule(tick=tick, gpu=gpu, event_type=EVENT_MIG_CONFIG_CHANGE, data=0, instance=None)
        self._states.clear()

    def _resolve_instance(self, gpu: int, instance: int | None, tick: int) -> tuple[int, int]:
        layout = self.layout(gpu, tick)
        if instance is None or not layout.mig_enabled or instance >= len(layout.instances):
            return NOT_ATTRIBUTABLE, NOT_ATTRIBUTABLE
        found = layout.instances[instance]
        return found.gpu_instance, found.compute_instance

    # ------------------------------------------------------------------------------------------ the tenants

    def _workload_sources(self) -> list[WorkloadSource]:
        sources = []
        seed = self.scenario.seed & 0xFFFFFFFF
        for number, pod in enumerate(self.scenario.pods):
            workload = pod.workload

            def curve(resource: int, which, upper: float = math.inf) -> CurveEvaluator:
                return CurveEvaluator(which, seed_parts=(seed, number, resource), upper=upper)

            evaluators = dict(memory=curve(0, workload.memory), sm=curve(1, workload.sm, 1.0),
                              dram=curve(2, workload.dram, 1.0), pcie_rx=curve(3, workload.pcie),
                              pcie_tx=curve(4, workload.pcie_tx))
            refs = ([(pod.device, True)] if pod.device else []) + [(ref, False) for ref in pod.extra_devices]
            for ref, assigned in refs:
                sources.append(WorkloadSource(pod=pod, gpu=ref.gpu, instance=ref.instance, assigned=assigned,
                                              **evaluators))
        first = len(self.scenario.pods)
        for number, host in enumerate(self.scenario.host_processes, start=first):  # a process in no pod
            workload = host.workload
            sources.append(WorkloadSource(
                pod=host, gpu=host.device.gpu, instance=host.device.instance, assigned=False,  # type: ignore[arg-type]
                memory=CurveEvaluator(workload.memory, seed_parts=(seed, number, 0)),
                sm=CurveEvaluator(workload.sm, seed_parts=(seed, number, 1), upper=1.0),
                dram=CurveEvaluator(workload.dram, seed_parts=(seed, number, 2), upper=1.0),
                pcie_rx=CurveEvaluator(workload.pcie, seed_parts=(seed, number, 3)),
                pcie_tx=CurveEvaluator(workload.pcie_tx, seed_parts=(seed, number, 4))))
        return sources

    def processes(self, tick: int | None = None) -> list[SimProcess]:
        """Every (pid, pod, device) running at ``tick``, including unauthorized use of extra devices."""
        rows = []
        for index, gpu in enumerate(self.state(tick).gpus):
            for process in gpu.whole.processes:
                pod = process.pod
                rows.append(SimProcess(process.pid, pod.namespace, pod.name, pod.uid or "", pod.container,
                                       process.device_uuid, getattr(pod, "command", ""), getattr(pod, "cgroup", "")))
            server = self.mps_server(index, tick)
            if server is not None:  # in the device plugin's MPS control daemon pod, which no scenario lists
                rows.append(SimProcess(server, "", "", "", "", self.gpu_uuids[index], mps.MPS_SERVER_COMM,
                                       mps.daemon_cgroup(self.scenario.seed, index)))
        return rows

    def mps_server(self, gpu: int, tick: int | None = None) -> int | None:
        """The PID of ``gpu``'s MPS server at ``tick``, or None: no MPS, or no client running (the control daemon
        starts the server for the first client)."""
        pid = self.mps_servers.get(gpu)
        if pid is None or self.layout(gpu, tick).mig_enabled or not self.state(tick).gpus[gpu].whole.processes:
            return None
        return pid

    def assignments(self, tick: int | None = None) -> list[SimAssignment]:
        """The kubelet's view: devices assigned to running pods (never their extra_devices)."""
        tick = self.tick if tick is None else tick
        rows = []
        for pod in self.scenario.pods:
            if pod.device is None or not pod.running(tick):
                continue
            layout = self.layout(pod.device.gpu, tick)
            if layout.mig_enabled:
                if pod.device.instance is None or pod.device.instance >= len(layout.instances):
                    continue
                instance = layout.instances[pod.device.instance]
                resource, device_id = f"nvidia.com/mig-{instance.profile.name}", instance.uuid
            else:
                resource, device_id = "nvidia.com/gpu", self.gpu_uuids[pod.device.gpu]
                if pod.device.replica is not None:
                    device_id = f"{device_id}::{pod.device.replica}"
            rows.append(SimAssignment(pod.namespace, pod.name, pod.container, resource, device_id))
        return rows

    def device_uuids(self, tick: int | None = None) -> list[SimDevice]:
        """Every GPU and MIG device with its index, profile and UUID, as laid out at ``tick``."""
        rows = []
        for gpu, model in enumerate(self.models):
            replicas = self.scenario.gpus[gpu].replicas
            rows.append(SimDevice(gpu, self.gpu_uuids[gpu], model.name, model.key, replicas=replicas))
            for instance in self.layout(gpu, tick).instances:
                rows.append(SimDevice(gpu, instance.uuid, f"{model.name} MIG {instance.profile.name}", model.key,
                                      mig_profile=instance.profile.name, instance=instance.index,
                                      slot=instance.slot, gpu_instance=instance.gpu_instance,
                                      compute_instance=instance.compute_instance))
        return rows

    def end_pod(self, namespace: str, name: str, tick: int | None = None) -> bool:
        """The pod's processes end at ``tick`` (default: now), as when it is evicted or deleted; False if unknown.

        Ticks already computed from ``tick`` on are dropped from the cache so the next reading reflects it.
        """
        tick = self.tick if tick is None else tick
        for pod in self.scenario.pods:
            if (pod.namespace, pod.name) == (namespace, name):
                if pod.end_tick is None or pod.end_tick > tick:
                    pod.end_tick = tick
                    for cached in [t for t in self._states if t >= tick]:
                        del self._states[cached]
                return True
        return False

    # ------------------------------------------------------------------------------------------------ faults

    def inject_error(self, function_name: str, error_code: int, *, device_index: int | None = None,
                     times: int | None = 1) -> None:
        """The next ``times`` calls of ``function_name`` (on that GPU, if given) raise NVMLError(error_code)."""
        if function_name not in self.nvml.simulated_functions():
            raise ValueError(f"{function_name!r} is not an NVML function of the simulation")
        if times is not None and times < 1:
            raise ValueError(f"times must be >= 1 or None, got {times}")
        self.error_rules.append(ErrorRule(function_name, int(error_code), device_index, times))

    def clear_injected_errors(self) -> None:
        self.error_rules.clear()

    def promote_scheduled_errors(self) -> None:
        """Scenario faults with ``error:`` become injected errors once their tick has come."""
        tick = self.tick
        while self._scheduled_errors and self._scheduled_errors[0].at <= tick:
            fault = self._scheduled_errors.pop(0)
            self.inject_error(fault.function, fault.error, device_index=fault.gpu, times=fault.times)

    @property
    def has_scheduled_errors(self) -> bool:
        return bool(self._scheduled_errors)

    def lose_gpu(self, gpu: int) -> None:
        """The GPU falls off the bus now: every call for it (and its MIG devices) answers GpuIsLost."""
        self._check_gpu(gpu)
        self._lost_at[gpu] = min(self._lost_at.get(gpu, self.tick), self.tick)
        self.events.notify()

    def pcie_per_instance(self, gpu: int) -> bool:
        """Whether GPM answers PCIe rates per GPU instance on this GPU (scenario ``gpm_pcie_per_instance``)."""
        return self.scenario.gpus[gpu].gpm_pcie_per_instance

    def is_lost(self, gpu: int, tick: int | None = None) -> bool:
        at = self._lost_at.get(gpu)
        return at is not None and at <= (self.tick if tick is None else tick)

    def push_xid(self, gpu: int, xid: int, *, instance: int | None = None) -> None:
        """An Xid happens now on the GPU (on the MIG instance at that index of its mig list, if given)."""
        self.push_event(gpu, EVENT_XID, data=xid, instance=instance)

    def push_event(self, gpu: int, event_type: int, *, data: int = 0, instance: int | None = None) -> None:
        self._check_gpu(gpu)
        self.events.push(gpu=gpu, event_type=event_type, data=data, instance=instance)

    def reconfigure_mig(self, gpu: int, profiles: list[str]) -> None:
        """Replace the GPU's MIG instances now: new generation, new UUIDs, old handles go stale, event 0x100."""
        self._check_gpu(gpu)
        if not self.layout(gpu).mig_enabled:
            raise ValueError(f"GPU {gpu} is not in MIG mode")
        place_instances(self.models[gpu], layout_entries(profiles))  # ValueError naming the one that does not fit
        self._add_change(gpu, self.tick, list(profiles))

    def _check_gpu(self, gpu: int) -> None:
        if not 0 <= gpu < len(self.models):
            raise ValueError(f"no GPU {gpu}: the node has {len(self.models)}")
