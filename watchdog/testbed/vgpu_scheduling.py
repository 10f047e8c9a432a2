"""How a vGPU host's scheduler shares the physical GPU among its VMs: the physics behind simulated vGPU numbers.

A scenario VM's ``sm`` curve is its *demand*: the share of the GPU's time it would take if it had the GPU alone.
What it gets depends on the host's vGPU scheduler (NVIDIA Virtual GPU Software user guide, "Changing Scheduling
Behavior for Time-Sliced vGPUs"):

* **best_effort**: the GPU's time goes to whoever has work; once the demands add up to more than the GPU, each VM
  gets a share in proportion to what it asks (the same convention as the simulator's weighted time slicing,
  ``contention.proportional_share``), so a VM that ramps up takes time from every neighbour;
* **equal_share**: each vGPU with work gets at most 1/N of the GPU (N: the vGPUs with work); what one leaves
  unused is not given to the others;
* **fixed_share**: each vGPU gets at most 1/(the most vGPUs of its type the GPU holds), however many run.

Every switch between VMs costs the engine time no VM gets, as between time-sliced processes
(``contention.switching``, with the GPU's ``context_switch_overhead``). A VM's DRAM use follows the time it runs:
granted a part of its demand, it moves that part of the bytes it would have moved.

A MIG-backed vGPU owns a GPU instance: no scheduler stands between it and its neighbours' SMs, so it gets what it
asks of its instance, and its load reaches the GPU the way a MIG instance's processes do (power, hence the clock
the software power cap settles on for the whole board).

The simulator's assumption, not an NVML statement (the NVML API reference does not define the scale of a vGPU's
``smUtil``): a time-sliced vGPU's ``smUtil`` is its achieved share of the physical GPU's time, in percent; a
MIG-backed vGPU's is how busy its GPU instance is, in percent. Both are time shares, like ``utilization.gpu``:
a lower clock under a power cap shows in the work done (GPM SM activity), not in them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from watchdog.testbed.contention import proportional_share, switching
from watchdog.testbed.curves import CurveEvaluator
from watchdog.testbed.profiles import vgpu_type
from watchdog.testbed.scenario import Scenario, vm_mig_devices
from watchdog.testbed.scenario_parts import VmSpec

VgpuPolicy = Literal["best_effort", "equal_share", "fixed_share"]


@dataclass(frozen=True, slots=True)
class VmLoad:
    """One VM's demand on its vGPU host GPU: its curves bound to the scenario's seed, and where it runs."""

    spec: VmSpec
    gpu: int
    sm: CurveEvaluator  # demand, 0–1 of the GPU (time-sliced) or of its GPU instance (MIG-backed)
    dram: CurveEvaluator  # demand, 0–1 of the same
    max_instances: int  # of its vGPU type per GPU (fixed_share's divisor)
    mig_device: int | None = None  # MIG-backed: index into the GPU's MIG devices (its GPU instance)


@dataclass(frozen=True, slots=True)
class VgpuShares:
    """What the scheduler granted the VMs of one time-sliced host at one tick."""

    sm: list[float]  # achieved share of the physical GPU's time, per VM
    dram: list[float]  # achieved share of the GPU's DRAM bandwidth, per VM
    switching: float  # share of the GPU's time spent switching between VMs
    switches_per_second: float


def vm_loads(scenario: Scenario) -> list[VmLoad]:
    """Every VM of the scenario's vGPU hosts, its curves seeded by (seed, GPU, position on the GPU)."""
    loads = []
    seed = scenario.seed & 0xFFFFFFFF
    for gpu, spec in enumerate(scenario.gpus):
        if spec.vgpu is None:
            continue
        for position, (vm, device) in enumerate(zip(spec.vgpu.vms, vm_mig_devices(spec))):
            parts = (seed, 0x76, gpu, position)
            loads.append(VmLoad(spec=vm, gpu=gpu, sm=CurveEvaluator(vm.sm, seed_parts=(*parts, 0), upper=1.0),
                                dram=CurveEvaluator(vm.dram, seed_parts=(*parts, 2), upper=1.0),
                                max_instances=vgpu_type(spec.model, vm.type).max_instances, mig_device=device))
    return loads


def schedule_vgpus(policy: VgpuPolicy, sm_demand: list[float], dram_demand: list[float], *,
                   max_instances: int, switch_overhead: float) -> VgpuShares:
    """The shares ``policy`` grants VMs asking ``sm_demand`` of the GPU's time (and ``dram_demand`` of its DRAM
    bandwidth while they run); pure."""
    lost, per_second = switching(sm_demand, per_context=switch_overhead)
    capacity = 1.0 - lost
    asked = [min(max(demand, 0.0), 1.0) for demand in sm_demand]
    if policy == "best_effort":
        sm = proportional_share(asked, capacity)
    else:
        active = sum(1 for demand in asked if demand > 0.0)
        slots = active if policy == "equal_share" else max(max_instances, 1)
        cap = capacity / max(slots, 1)
        sm = [min(demand, cap) for demand in asked]
    if lost:  # the engine switches only while it has work: the time lost follows how busy it is
        fraction = min(1.0, sum(sm) / capacity)
        lost, per_second = lost * fraction, per_second * fraction
    dram = [min(max(dram_demand[at], 0.0), 1.0) * (sm[at] / asked[at] if asked[at] > 0.0 else 0.0)
            for at in range(len(asked))]
    return VgpuShares(sm=sm, dram=dram, switching=lost, switches_per_second=per_second)
