"""How tenants sharing a GPU hurt each other: the physics behind the simulated numbers.

Five mechanisms, each a pure function so it can be tested on its own:

* **Time slicing** (no MIG): the SM scheduler and the memory controller are shared, so each process gets at most
  a fair share and what one leaves unused goes to the others (water-filling / max-min fairness), or, under a
  scheduler whose shares follow demand (a weighted scheduler, MPS without limits), each gets a share in proportion
  to what it asks once the total exceeds the capacity (`proportional_share`). Every switch between contexts costs
  the engine time no process gets (`switching`): the shares then sum below 1 while utilization.gpu reads 100 %.
* **MPS with the device plugin's limits** (`mps_share`): one context for all clients, so no switching; each client
  capped at its active-thread share of the SMs (100/replicas %) and its pinned memory (total/replicas), while DRAM
  bandwidth and L2 stay shared: a client short of bandwidth gets less done in the same SM time.
* **Power**: every instance draws dynamic power in proportion to its SMs and how busy they are; above the
  enforced limit the driver's software power cap lowers the clock of the *whole* GPU (clock-event reason
  SwPowerCap, 0x4 in nvml.h) until the draw fits, which slows every MIG instance, isolated or not.
* **Memory**: allocations are served first come, first served until the instance/GPU is full; the rest fail.
* **MIG** isolates SM and DRAM bandwidth between instances but not power or PCIe (arXiv 2508.20274), so only the
  first mechanism stops at an instance boundary.

A vGPU host's VMs share the GPU through its vGPU scheduler instead (testbed/vgpu_scheduling.py, built on the time
slicing functions here); their achieved load then meets the power and PCIe mechanisms like any instance's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from watchdog.testbed.profiles import GpuModel

CLOCK_STEP_MHZ = 15  # NVIDIA GPU clocks move in 15 MHz bins (nvidia-smi -q -d SUPPORTED_CLOCKS)
AMBIENT_CELSIUS = 28.0
CELSIUS_PER_TDP = 55.0  # a GPU at its TDP sits ~83 °C in a typical air-cooled chassis


SWITCHES_PER_SECOND_PER_CONTEXT = 500.0
"""Context-switch requests per second per context with work, at a ~2 ms time slice: an assumption (the driver's
default time slice is not documented; ``nvidia-smi compute-policy --set-timeslice`` offers short/medium/long)."""
MAX_SWITCHING = 0.3  # the most of a GPU's time the simulator lets switching take, however many contexts


@dataclass(frozen=True, slots=True)
class GpuSharing:
    """How the processes on one GPU (or on each of its MIG instances) share it, per the scenario."""

    scheduler: Literal["roundrobin", "proportional"] = "roundrobin"
    switch_overhead: float = 0.0  # time lost per extra context with work, at saturation (0–1 of the GPU)
    mps_replicas: int | None = None  # the device plugin's MPS sharing with this many replicas (limits per client)
    vgpu_scheduler: str | None = None  # a vGPU host: its scheduler policy (testbed/vgpu_scheduling.py)


def switching(demands: list[float], *, per_context: float) -> tuple[float, float]:
    """Time-slicing's cost at saturation: (share of the engine's time spent switching, switches per second).

    Grows with the number of contexts that have work, ``per_context`` for each beyond the first: a lone context
    is never switched out. Both figures are for a saturated engine; the caller scales them by how busy it is.
    """
    active = sum(1 for demand in demands if demand > 0.0)
    if active < 2 or per_context <= 0.0:
        return 0.0, 0.0
    return min(MAX_SWITCHING, per_context * (active - 1)), SWITCHES_PER_SECOND_PER_CONTEXT * active


def mps_share(sm_demand: list[float], dram_demand: list[float], *, replicas: int
              ) -> tuple[list[float], list[float], list[float]]:
    """MPS clients under the device plugin's limits: (SM activity, DRAM share, slowdown) per client.

    Each client's SMs are capped at 1/replicas of the GPU (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100/replicas): no
    client can take another's SMs, and what one leaves idle stays idle. DRAM bandwidth is one pool that nothing
    partitions: past its capacity each client gets bandwidth in proportion to what it asks (the memory controllers
    serve requests as they arrive, so a streaming client with more in flight gets more: an assumption of this
    simulator, not a documented NVIDIA behaviour). A client granted less than it asks for gets proportionally less
    done in its SM time (memory-bound kernels wait), so its SM activity falls by the same factor: the slowdown a
    neighbour causes.
    """
    cap = 1.0 / max(replicas, 1)
    dram = proportional_share(dram_demand)
    sm, slowdown = [], []
    for position, demand in enumerate(sm_demand):
        asked, got = dram_demand[position], dram[position]
        factor = asked / got if got > 0 and asked > got else 1.0
        sm.append(min(max(demand, 0.0), cap) / factor)
        slowdown.append(factor)
    return sm, dram, slowdown


def water_fill(demands: list[float], capacity: float = 1.0) -> list[float]:
    """Max-min fair shares: each gets min(demand, fair share); leftovers are redistributed to the hungry."""
    shares = [0.0] * len(demands)
    hungry = [index for index, demand in enumerate(demands) if demand > 0.0]
    remaining = capacity
    while hungry and remaining > 1e-12:
        fair = remaining / len(hungry)
        satisfied = [index for index in hungry if demands[index] - shares[index] <= fair]
        if not satisfied:
            for index in hungry:
                shares[index] += fair
            break
        for index in satisfied:
            remaining -= demands[index] - shares[index]
            shares[index] = demands[index]
        hungry = [index for index in hungry if index not in satisfied]
    return shares


def proportional_share(demands: list[float], capacity: float = 1.0) -> list[float]:
    """Shares that follow demand: all of it while the total fits, else each in proportion to what it asks.

    A greedy client then takes time from a modest one even below the modest one's fair level, which max-min
    fairness never does: the second scheduler model of docs/detection.md ("Time-slicing, whatever the scheduler").
    """
    total = sum(demand for demand in demands if demand > 0.0)
    if total <= capacity:
        return [max(demand, 0.0) for demand in demands]
    return [max(demand, 0.0) * capacity / total for demand in demands]


SCHEDULERS = {"roundrobin": water_fill, "proportional": proportional_share}


def allocate_memory(demands: list[int], capacity: int) -> list[int]:
    """First come, first served: each gets what it asks for while memory lasts, then only what is left."""
    granted: list[int] = []
    left = max(capacity, 0)
    for demand in demands:
        take = min(demand, left)
        granted.append(take)
        left -= take
    return granted


@dataclass(frozen=True, slots=True)
class PowerState:
    power_watts: float
    sm_clock_mhz: int
    clock_factor: float  # sm_clock / max: the share of full-speed work every instance achieves
    capped: bool
    temperature_celsius: float


def govern_power(model: GpuModel, *, limit_watts: float, dynamic_watts: float) -> PowerState:
    """The clock the software power cap settles on for a dynamic draw of ``dynamic_watts`` at max clock.

    Dynamic power is taken as linear in clock (a simplification: voltage also drops, so real savings are
    larger); the clock is floored to a 15 MHz bin so the capped draw never exceeds the limit, and never goes
    below the model's minimum clock.
    """
    max_clock = model.sm_clock_max_mhz
    headroom = limit_watts - model.idle_watts
    if dynamic_watts <= headroom or dynamic_watts <= 0.0:
        power, clock, capped = model.idle_watts + dynamic_watts, max_clock, False
    else:
        wanted = max_clock * max(headroom, 0.0) / dynamic_watts
        clock = max(model.sm_clock_min_mhz, int(math.floor(wanted / CLOCK_STEP_MHZ)) * CLOCK_STEP_MHZ)
        power, capped = model.idle_watts + dynamic_watts * clock / max_clock, True
    temperature = AMBIENT_CELSIUS + CELSIUS_PER_TDP * power / model.power_limit_watts
    return PowerState(power_watts=power, sm_clock_mhz=clock, clock_factor=clock / max_clock, capped=capped,
                      temperature_celsius=temperature)


def dynamic_watts(model: GpuModel, sm_share: float, busy: float) -> float:
    """Dynamic draw at max clock of ``busy`` (0–1) of ``sm_share`` (0–1) of the GPU's SMs."""
    return (model.full_load_watts - model.idle_watts) * sm_share * busy


def scale_to_link(demands: list[float], capacity: float) -> list[float]:
    """PCIe: one link per GPU; past its capacity every stream slows in proportion."""
    total = sum(demands)
    if total <= capacity or total <= 0.0:
        return list(demands)
    return [demand * capacity / total for demand in demands]
