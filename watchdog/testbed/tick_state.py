"""The node at one tick: what every simulated NVML answer is read from.

The node state is computed once per tick from the scenario's demand curves, the GPU layouts in force at that
tick and the contention model, then cached; every NVML call is a lookup into it. Keeping the computation in one
pure function of (tick, layouts, workloads) is what lets a benchmark sample 16 GPUs × 7 instances per tick at the
cost of dictionary lookups, and lets tests ask for any tick in any order.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from watchdog.model import NOT_ATTRIBUTABLE
from watchdog.testbed.contention import (SCHEDULERS, GpuSharing, allocate_memory, dynamic_watts, govern_power,
                                         mps_share, switching, water_fill)
from watchdog.testbed.curves import CurveEvaluator
from watchdog.testbed.pcie_link import share_link
from watchdog.testbed.profiles import GpuModel, MigProfile
from watchdog.testbed.scenario_parts import PodSpec
from watchdog.testbed.vgpu_scheduling import VmLoad, schedule_vgpus

MIB = 1 << 20
MIG_RESERVED_BYTES = 12 * MIB  # a fresh MIG instance shows ~12 MiB used before any process (nvidia-smi)
CLOCK_REASON_GPU_IDLE = 0x1  # nvmlClocksEventReasonGpuIdle
CLOCK_REASON_SW_POWER_CAP = 0x4  # nvmlClocksEventReasonSwPowerCap
OCCUPANCY_PER_ACTIVE_SM = 0.6  # warps resident per busy SM, as a share of the maximum: a typical DL kernel


@dataclass(frozen=True, slots=True)
class InstanceLayout:
    """One MIG device as enumerated in one layout generation."""

    index: int  # position in the GPU's ``mig`` list (what scenario pods refer to)
    slot: int
    gpu_instance: int
    compute_instance: int
    profile: MigProfile
    uuid: str
    memory_total: int  # of its GPU instance: every compute instance of a GI reports the GI's memory
    sm_share: float  # the instance's SMs over the GPU's SMs
    gi_compute_instances: int = 1  # compute instances sharing its GPU instance's memory, DRAM bandwidth and L2


@dataclass(frozen=True, slots=True)
class GpuLayout:
    index: int
    generation: int  # bumped by every MIG reconfiguration of this GPU
    mig_enabled: bool
    instances: tuple[InstanceLayout, ...] = ()
    by_slot: dict[int, InstanceLayout] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WorkloadSource:
    """One pod's process on one device, with its demand curves."""

    pod: PodSpec
    gpu: int
    instance: int | None  # index into the GPU's mig list
    assigned: bool  # False for extra_devices (used without a kubelet assignment)
    memory: CurveEvaluator
    sm: CurveEvaluator
    dram: CurveEvaluator
    pcie_rx: CurveEvaluator
    pcie_tx: CurveEvaluator


@dataclass(frozen=True, slots=True)
class ProcessState:
    pid: int
    pod: PodSpec
    device_uuid: str
    gpu_instance: int  # NOT_ATTRIBUTABLE off MIG
    compute_instance: int
    memory_used: int
    memory_demand: int
    sm: float  # time share of its instance/GPU's SMs, after sharing (0–1)
    dram: float  # share of its instance/GPU's DRAM bandwidth, after sharing (0–1)
    assigned: bool
    dram_slowdown: float = 1.0  # in a split GI: DRAM bandwidth asked / granted, how much longer its work takes


@dataclass(frozen=True, slots=True)
class DomainState:
    """One SM/DRAM isolation domain: a MIG instance, or a whole GPU without MIG."""

    busy: float  # Σ process time shares + switching (0–1): GRAPHICS_UTIL / nvmlDeviceGetUtilizationRates.gpu
    sm: float  # achieved work: (busy − switching) × clock factor (GPM SM_UTIL)
    dram: float
    memory_used: int
    memory_total: int
    memory_reserved: int
    processes: tuple[ProcessState, ...]
    layout: InstanceLayout | None = None
    pcie_rx: float = 0.0  # bytes/s its processes got over the link (GPM PCIE_RX_PER_SEC of a GPU instance)
    pcie_tx: float = 0.0
    switching: float = 0.0  # share of the time the engine spent switching contexts (GPM GR0_CTXSW_ACTIVE_PCT / 100)
    switches_per_second: float = 0.0  # context-switch requests per second (GPM GR0_CTXSW_REQUESTS / interval)


@dataclass(frozen=True, slots=True)
class GpuState:
    index: int
    layout: GpuLayout
    power_watts: float
    power_limit_watts: float
    sm_clock_mhz: int
    clock_reasons: int
    temperature_celsius: float
    whole: DomainState  # the GPU as a whole (aggregate of its instances in MIG mode)
    instances: dict[int, DomainState]  # by slot
    pcie_rx_bytes: float
    pcie_tx_bytes: float
    # A vGPU host: VM name → (SM, DRAM) it achieved, 0–1 of the GPU (time-sliced) or of its GPU instance (MIG-backed)
    vgpus: dict[str, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AllocationFailure:
    pod: str
    device_uuid: str
    requested: int
    granted: int


@dataclass(frozen=True, slots=True)
class TickState:
    tick: int
    gpus: tuple[GpuState, ...]
    allocation_failures: tuple[AllocationFailure, ...]


def compute_tick(tick: int, *, models: list[GpuModel], limits: list[float], gpu_uuids: list[str],
                 layouts: list[GpuLayout], sources: list[WorkloadSource],
                 sharing: list[GpuSharing] | None = None, vms: list[VmLoad] | None = None) -> TickState:
    """The whole node at ``tick``; pure in its arguments. ``sharing``: per GPU, how its processes share it
    (default: round-robin time slices without switching overhead); ``vms``: the vGPU hosts' VMs."""
    running_vms: dict[int, list[VmLoad]] = {}
    for vm in vms or ():
        if vm.spec.running(tick):
            running_vms.setdefault(vm.gpu, []).append(vm)
    domains: dict[tuple[int, int | None], list[WorkloadSource]] = {}
    for source in sources:
        if not source.pod.running(tick):
            continue
        layout = layouts[source.gpu]
        if layout.mig_enabled:
            if source.instance is None or source.instance >= len(layout.instances):
                continue  # its instance is gone after a reconfiguration: the process would have died
            key = (source.gpu, layout.instances[source.instance].slot)
        else:
            key = (source.gpu, None)
        domains.setdefault(key, []).append(source)
    failures: list[AllocationFailure] = []
    gpus = []
    for index, model in enumerate(models):
        gpus.append(_gpu_state(tick, model=model, limit=limits[index], uuid=gpu_uuids[index],
                               layout=layouts[index], domains=domains, failures=failures,
                               sharing=sharing[index] if sharing else GpuSharing(),
                               vms=running_vms.get(index, [])))
    return TickState(tick=tick, gpus=tuple(gpus), allocation_failures=tuple(failures))


def _shared_domain(tick: int, sources: list[WorkloadSource], *, uuid: str, total: int, reserved: int,
                   instance: InstanceLayout | None, failures: list[AllocationFailure],
                   sharing: GpuSharing = GpuSharing()) -> tuple[DomainState, list]:
    """One device (a whole GPU, or a MIG instance) shared by its processes: time slices, or MPS clients
    (testbed/contention.py says how each divides SM time, DRAM bandwidth and memory)."""
    memory_demand = [int(source.memory(tick)) for source in sources]
    sm_demand = [source.sm(tick) for source in sources]
    dram_demand = [source.dram(tick) for source in sources]
    mps = sharing.mps_replicas is not None and instance is None
    if mps:
        # The plugin's pinned limit: the GPU's memory / replicas, whole MiB (model/sharing.py).
        limit = total // sharing.mps_replicas // MIB * MIB  # type: ignore[operator]
        granted = allocate_memory([min(demand, limit) for demand in memory_demand], total - reserved)
        sm, dram, slowdown = mps_share(sm_demand, dram_demand, replicas=sharing.mps_replicas)  # type: ignore[arg-type]
        lost, per_second = 0.0, 0.0
    else:
        granted = allocate_memory(memory_demand, total - reserved)
        lost, per_second = switching(sm_demand, per_context=sharing.switch_overhead)
        share = SCHEDULERS[sharing.scheduler]
        sm = share(sm_demand, 1.0 - lost) if lost else share(sm_demand)
        dram = share(dram_demand)
        slowdown = [1.0] * len(sources)
        if lost:  # the engine switches only while it has work: the time lost follows how busy it is
            fraction = min(1.0, sum(sm) / (1.0 - lost))
            lost, per_second = lost * fraction, per_second * fraction
    gi = instance.gpu_instance if instance else NOT_ATTRIBUTABLE
    ci = instance.compute_instance if instance else NOT_ATTRIBUTABLE
    processes = []
    for position, source in enumerate(sources):
        if granted[position] < memory_demand[position]:
            failures.append(AllocationFailure(source.pod.key, uuid, memory_demand[position], granted[position]))
        processes.append(ProcessState(pid=source.pod.pid, pod=source.pod, device_uuid=uuid, gpu_instance=gi,
                                      compute_instance=ci, memory_used=granted[position],
                                      memory_demand=memory_demand[position], sm=sm[position],
                                      dram=dram[position], assigned=source.assigned,
                                      dram_slowdown=slowdown[position]))
    pcie = [(source.pcie_rx(tick), source.pcie_tx(tick)) for source in sources]
    domain = DomainState(busy=min(sum(sm) + lost, 1.0), sm=0.0, dram=min(sum(dram), 1.0), memory_used=sum(granted),
                         memory_total=total, memory_reserved=reserved, processes=tuple(processes), layout=instance,
                         switching=lost, switches_per_second=per_second)
    return domain, pcie


def _split_gpu_instance(tick: int, members: list[InstanceLayout], *, domains: dict, gpu: int,
                        failures: list[AllocationFailure]) -> list[tuple[InstanceLayout, DomainState, list]]:
    """A GPU instance split into compute instances: one memory pool and one DRAM bandwidth for all their processes,
    SM time per compute instance. A process granted less DRAM bandwidth than it asks for gets through
    proportionally less work (memory-bound kernels wait on DRAM), so its SM activity falls with it, unless it serves
    a fixed request rate (``fixed_rate``): then each request takes longer and its SMs are busier."""
    first = members[0]
    per_ci = [domains.get((gpu, member.slot), []) for member in members]
    sources = [source for group in per_ci for source in group]
    memory_demand = [int(source.memory(tick)) for source in sources]
    granted = allocate_memory(memory_demand, first.memory_total - MIG_RESERVED_BYTES)
    dram_demand = [source.dram(tick) for source in sources]
    dram = water_fill(dram_demand)
    pool_used, pool_dram = sum(granted), min(sum(dram), 1.0)
    result, position = [], 0
    for member, group in zip(members, per_ci):
        sm = water_fill([source.sm(tick) for source in group])
        processes = []
        for own, source in enumerate(group):
            at = position + own
            if granted[at] < memory_demand[at]:
                failures.append(AllocationFailure(source.pod.key, member.uuid, memory_demand[at], granted[at]))
            slowdown = dram_demand[at] / dram[at] if dram[at] > 0 and dram_demand[at] > dram[at] else 1.0
            # A batch job gets less done in the same SM time; a server at a fixed request rate keeps up by staying
            # busy longer per request (its SMs wait on DRAM), so its activity rises instead.
            busy = min(1.0, sm[own] * slowdown) if source.pod.workload.fixed_rate else sm[own] / slowdown
            processes.append(ProcessState(pid=source.pod.pid, pod=source.pod, device_uuid=member.uuid,
                                          gpu_instance=member.gpu_instance, compute_instance=member.compute_instance,
                                          memory_used=granted[at], memory_demand=memory_demand[at], sm=busy,
                                          dram=dram[at], assigned=source.assigned, dram_slowdown=slowdown))
        position += len(group)
        domain = DomainState(busy=min(sum(p.sm for p in processes), 1.0), sm=0.0, dram=pool_dram,
                             memory_used=pool_used, memory_total=first.memory_total,
                             memory_reserved=MIG_RESERVED_BYTES, processes=tuple(processes), layout=member)
        result.append((member, domain, [(source.pcie_rx(tick), source.pcie_tx(tick)) for source in group]))
    return result


def _gpu_state(tick: int, *, model: GpuModel, limit: float, uuid: str, layout: GpuLayout,
               domains: dict, failures: list[AllocationFailure], sharing: GpuSharing,
               vms: list[VmLoad] | None = None) -> GpuState:
    vms = vms or []
    parts: list[tuple[DomainState, float]] = []  # (domain, share of the GPU's SMs)
    pcie: list[tuple[float, float]] = []
    vgpus: dict[str, tuple[float, float]] = {}
    on_instance = {layout.instances[vm.mig_device].slot: vm for vm in vms
                   if vm.mig_device is not None and vm.mig_device < len(layout.instances)} if layout.mig_enabled else {}
    if layout.mig_enabled:
        for instance in layout.instances:
            if instance.gi_compute_instances > 1:
                if instance.compute_instance == 0:
                    members = [i for i in layout.instances if i.gpu_instance == instance.gpu_instance]
                    for member, domain, streams in _split_gpu_instance(tick, members, domains=domains,
                                                                       gpu=layout.index, failures=failures):
                        parts.append((domain, member.sm_share))
                        pcie.extend(streams)
                continue
            domain, streams = _shared_domain(tick, domains.get((layout.index, instance.slot), []),
                                             uuid=instance.uuid, total=instance.memory_total,
                                             reserved=MIG_RESERVED_BYTES, instance=instance, failures=failures,
                                             sharing=sharing)
            vm = on_instance.get(instance.slot)
            if vm is not None:  # a MIG-backed vGPU: its VM alone uses the GPU instance
                busy, dram = min(max(vm.sm(tick), 0.0), 1.0), min(max(vm.dram(tick), 0.0), 1.0)
                domain = dataclasses.replace(domain, busy=busy, dram=dram)
                vgpus[vm.spec.name] = (busy, dram)
            parts.append((domain, instance.sm_share))
            pcie.extend(streams)
    else:
        domain, streams = _shared_domain(tick, domains.get((layout.index, None), []), uuid=uuid,
                                         total=model.memory_mib * MIB, reserved=model.reserved_mib * MIB,
                                         instance=None, failures=failures, sharing=sharing)
        if vms and sharing.vgpu_scheduler is not None:  # a time-sliced vGPU host: its scheduler shares the GPU
            shares = schedule_vgpus(sharing.vgpu_scheduler, [vm.sm(tick) for vm in vms],  # type: ignore[arg-type]
                                    [vm.dram(tick) for vm in vms], max_instances=vms[0].max_instances,
                                    switch_overhead=sharing.switch_overhead)
            domain = dataclasses.replace(domain, busy=min(sum(shares.sm) + shares.switching, 1.0),
                                         dram=min(sum(shares.dram), 1.0), switching=shares.switching,
                                         switches_per_second=shares.switches_per_second)
            vgpus = {vm.spec.name: (sm, dram) for vm, sm, dram in zip(vms, shares.sm, shares.dram)}
        parts.append((domain, 1.0))
        pcie.extend(streams)
    parts, rx_total, tx_total = share_link(parts, pcie, capacity=model.pcie_bytes_per_second)
    demand = sum(dynamic_watts(model, share, domain.busy) for domain, share in parts)
    power = govern_power(model, limit_watts=limit, dynamic_watts=demand)
    factor = power.clock_factor
    scaled = [(_with_work(domain, factor), share) for domain, share in parts]
    reasons = (CLOCK_REASON_SW_POWER_CAP if power.capped else 0) | (CLOCK_REASON_GPU_IDLE if demand <= 0 else 0)
    if layout.mig_enabled:
        instances = {domain.layout.slot: domain for domain, _ in scaled}
        pools = list({domain.layout.gpu_instance: domain for domain, _ in scaled}.values())  # memory, DRAM per GI
        whole = DomainState(
            busy=sum(domain.busy * share for domain, share in scaled),
            switching=sum(domain.switching * share for domain, share in scaled),
            switches_per_second=sum(domain.switches_per_second for domain, _ in scaled),
            sm=sum(domain.sm * share for domain, share in scaled),
            dram=sum(domain.dram * domain.memory_total for domain in pools) / (model.memory_mib * MIB),
            memory_used=sum(domain.memory_used for domain in pools),
            memory_total=model.memory_mib * MIB,
            memory_reserved=model.reserved_mib * MIB + sum(domain.memory_reserved for domain in pools),
            processes=tuple(process for domain, _ in scaled for process in domain.processes))
    else:
        instances, whole = {}, scaled[0][0]
    return GpuState(index=layout.index, layout=layout, power_watts=power.power_watts, power_limit_watts=limit,
                    sm_clock_mhz=power.sm_clock_mhz, clock_reasons=reasons,
                    temperature_celsius=power.temperature_celsius, whole=whole, instances=instances,
                    pcie_rx_bytes=rx_total, pcie_tx_bytes=tx_total, vgpus=vgpus)


def _with_work(domain: DomainState, clock_factor: float) -> DomainState:
    return DomainState(busy=domain.busy, sm=(domain.busy - domain.switching) * clock_factor, dram=domain.dram,
                       memory_used=domain.memory_used, memory_total=domain.memory_total,
                       memory_reserved=domain.memory_reserved, processes=domain.processes, layout=domain.layout,
                       pcie_rx=domain.pcie_rx, pcie_tx=domain.pcie_tx, switching=domain.switching,
                       switches_per_second=domain.switches_per_second)
