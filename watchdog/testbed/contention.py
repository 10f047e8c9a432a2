"""How tenants sharing a GPU hurt each other: the physics behind the simulated numbers.

Four mechanisms, each a pure function so it can be tested on its own:

* **Time slicing** (no MIG): the SM scheduler and the memory controller are shared, so each process gets at most
  a fair share and what one leaves unused goes to the others (water-filling / max-min fairness), or, under a
  scheduler whose shares follow demand (MPS clients, a weighted scheduler), each gets a share in proportion to
  what it asks once the total exceeds the capacity (`proportional_share`).
* **Power**: every instance draws dynamic power in proportion to its SMs and how busy they are; above the
  enforced limit the driver's software power cap lowers the clock of the *whole* GPU (clock-event reason
  SwPowerCap, 0x4 in nvml.h) until the draw fits, which slows every MIG instance, isolated or not.
* **Memory**: allocations are served first come, first served until the instance/GPU is full; the rest fail.
* **MIG** isolates SM and DRAM bandwidth between instances but not power or PCIe (arXiv 2508.20274), so only the
  first mechanism stops at an instance boundary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from watchdog.testbed.profiles import GpuModel

CLOCK_STEP_MHZ = 15  # NVIDIA GPU clocks move in 15 MHz bins (nvidia-smi -q -d SUPPORTED_CLOCKS)
AMBIENT_CELSIUS = 28.0
CELSIUS_PER_TDP = 55.0  # a GPU at its TDP sits ~83 °C in a typical air-cooled chassis


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
