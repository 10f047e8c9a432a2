"""The victim signals and contention tests per sharing domain: what "suffering" and "contended" mean in NVML terms.

Pure (no I/O). Every signal is oriented so that *higher is worse* and is 0–1 for the NVML-derived ones:

* power domain (whole GPU, also under MIG): SM clock loss ``1 − sm_clock/max`` weighted by the pod's own SM
  activity. A pod that does nothing loses nothing when clocks drop, and a pod whose own load falls sees its signal
  fall with it. The domain is contended only while a power/thermal reason bit is set
  (nvmlClocksEventReason*, nvml.h); GpuIdle does not count.
* timeslice (non-MIG GPU, several pods): the SM share the pod did *not* get, ``1 − Σ smUtil of its processes``
  (nvmlDeviceGetProcessUtilization; not available under MIG, per nvml.h). Contended while the GPU is saturated.
* gi (GPU instance with several compute instances): ``1 − SM activity`` of the pod's compute instance (GPM is
  per CI for SM, per GI for DRAM, as DCGM's DcgmGpmManager samples it). Contended while the GI's DRAM bandwidth
  is saturated.
* vgpu (best-effort time-sliced vGPUs, detection/vgpu.py): as timeslice, each VM's share being its vGPU's smUtil
  (nvmlDeviceGetVgpuUtilization); contended while the physical GPU is saturated.
* mps (MPS clients under the device plugin's limits): ``1 − SM activity`` of the client against its own slice of the
  SMs (detection/mps.py), read from ``Domain.victim_activity``. Contended while the GPU's DRAM bandwidth is
  saturated (GPM DRAM_BW_UTIL, whole GPU).
* pcie (a MIG GPU's link): ``1 − SM activity`` of the pod's instance, read from ``Domain.victim_activity``: an
  input pipeline starved of host data leaves its SMs idle. Contended while the busier direction nears the link's
  capacity (detection/pcie.py).

A share-based signal cannot tell "the neighbour took it" from "I asked for less": a work-conserving scheduler
hands the time a pod stops asking for to whoever does, so the GPU stays saturated either way. What it can tell is
whether the pod was held at its *fair level*: max-min fairness (water-filling) gives every pod min(demand, level),
so a pod below the level got all it asked for and is not starved, whatever its history (`fair_levels`); only a pod
held at the level can have demand a neighbour took — unless the GPU's scheduler follows demand (MPS), which the
detector learns where contention begins (`scheduler_model`). The GPU-instance domain judges DRAM by an SM-activity proxy, so
its findings are warnings unless the tenant's own signal says it suffers.

A tenant may replace the signal with its own (e.g. p99 latency from PromQL); the service evaluates the query and
hands the value in, detection only orients it.
"""

from __future__ import annotations

from typing import NamedTuple

from watchdog.config.detection import InterferencePolicy, VictimSignalOverride
from watchdog.detection.domain_types import TIME_SLICED, Domain, DomainKind


class Signal(NamedTuple):
    """One pod's victim signal this tick (None = unknown), and how a deviation of it is judged. A named tuple: one
    is built per pod per domain per tick, at a third of a frozen dataclass's cost."""

    value: float | None
    source: str  # "nvml" or "override": a change of source restarts the baseline
    min_deviation: float | None = None  # None: the policy's
    min_relative_deviation: float = 0.0
    threshold: float | None = None  # oriented like value: at or above it is an outlier


def contended(domain: Domain, policy: InterferencePolicy) -> bool | None:
    """Whether the domain's shared resource is exhausted this tick; None when the numbers are missing."""
    if domain.kind is DomainKind.POWER:
        if domain.reasons is None or domain.clock_loss is None:
            return None
        return bool(domain.reasons & policy.contention_reasons)
    if domain.busy is None:
        return None
    if domain.kind is DomainKind.PCIE:
        return domain.busy >= policy.pcie_saturation
    limit = policy.saturation if domain.kind in TIME_SLICED else policy.dram_saturation  # gi, mps
    return domain.busy >= limit


def victim_signal(
    domain: Domain,
    activity: float | None,
    *,
    override: VictimSignalOverride | None,
    external: float | None,
) -> Signal:
    """The pod's signal in this domain: its tenant's override when configured, else the NVML-derived one."""
    if override is not None:
        sign = 1.0 if override.higher_is_worse else -1.0
        threshold = None if override.threshold is None else sign * override.threshold
        return Signal(
            value=None if external is None else sign * external,
            source="override",
            min_deviation=override.min_deviation,
            min_relative_deviation=override.min_relative_deviation,
            threshold=threshold,
        )
    value = nvml_signal(domain, activity)
    return NVML if value is None else Signal(value, "nvml")


NVML = Signal(None, "nvml")
"""How an NVML-derived signal is judged (the policy's deviation floors, no threshold); its value is elsewhere."""


def nvml_signal(domain: Domain, activity: float | None) -> float | None:
    """The NVML-derived signal's value alone, for the detector's per-pod loop (no override configured)."""
    if activity is None:
        return None
    if domain.kind is DomainKind.POWER:
        loss = domain.clock_loss
        return None if loss is None else loss * activity
    return max(0.0, 1.0 - activity)


def fair_levels(domain: Domain) -> dict[str, float]:
    """Per pod: its water-filling fair share of the domain, as use relative to its own share (0–1).

    Time-sliced GPU: every pod weighs 1 and uses its SM time share. GPU instance: a pod weighs its compute
    instance's slices and uses activity × slices, a proxy for its part of the GI's DRAM bandwidth. The capacity is
    what the pods use together (the domain is only judged while saturated), the others' demands are taken to be
    what they get, and the pod itself asks for everything: the level it would then reach is its fair share. Pods
    whose use is unknown are left out; the power domain has no shares to be fair about and gets nothing.
    """
    if domain.kind is DomainKind.POWER or domain.kind is DomainKind.PCIE or domain.kind is DomainKind.MPS:
        # No shares to be fair about: power is the board's, any instance may use the whole link, and an MPS
        # client's SM slice is fixed by its limit while its DRAM use is not capped at all.
        return {}
    uses: dict[str, tuple[float, float]] = {}  # pod key → (use in capacity units, weight)
    for key, activity in domain.activity.items():
        weight = domain.share.get(key, 0.0)
        if activity is not None and weight > 0:
            uses[key] = (activity * weight, weight)
    capacity = sum(use for use, _ in uses.values())
    levels: dict[str, float] = {}
    for key, (_, weight) in uses.items():
        others = sorted((use / w, use, w) for other, (use, w) in uses.items() if other != key)
        remaining, weights = capacity, weight + sum(w for _, _, w in others)
        for ratio, use, w in others:
            if ratio >= remaining / weights:
                break  # this one (and every later one) wants more than the level: they share what remains
            remaining, weights = remaining - use, weights - w
        levels[key] = min(1.0, remaining / weights)
    return levels
