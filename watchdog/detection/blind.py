"""Culprit unknown: a victim that plainly suffers in a domain where nobody's use can be read is still reported.

Pure (no I/O). CPI²'s second half needs every neighbour's use; on an A100/A30 in MIG mode NVML has none (no GPM,
no utilisation in MIG mode, nvml.h), yet the power domain's contention is visible (a power/thermal clock-event
reason and the clock loss) and a tenant's own signal can show the victim's damage. Dropping that episode because
the culprit cannot be named loses a victim; naming one would be a guess. So detection reports it with culprit
unknown: a warning of its own kind (``FindingKind.INTERFERENCE_CULPRIT_UNKNOWN``, report-only, never an eviction
reason), whose evidence says which readings were missing and how to supply them.

MPS clients' DRAM domain (detection/mps.py) is a third: the GPU's bandwidth use is visible (GPM), each client's
share of it only where the per-process utilisation samples name it. The PCIe link of a MIG GPU (detection/pcie.py)
is the other such domain: its load is visible from the whole-GPU
counters (nvmlDeviceGetPcieThroughput) and the link's generation and width, but a driver that gives GPM's PCIe
rates for the whole GPU only (as DCGM samples them) leaves every instance's share unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from watchdog.detection.domain_types import Domain, DomainKind
from watchdog.model import Finding, FindingKind, Severity

MISSING_USE = "per-instance SM activity of the neighbours"
HOW_TO_SUPPLY = (
    "NVML has no GPM on this GPU: point signals.prometheus_url at a Prometheus that scrapes dcgm-exporter "
    "(DCGM_FI_PROF_SM_ACTIVE per GPU_I_ID) and enable signals.borrowed_activity"
)
MISSING_PCIE_USE = "per-instance PCIe throughput of the neighbours"
MISSING_MPS_USE = "per-process memory-controller share of the neighbouring MPS clients"
HOW_TO_SUPPLY_MPS = (
    "nvmlDeviceGetProcessUtilization named no memUtil sample for the neighbouring MPS clients this tick, so the "
    "client whose bandwidth use saturates the GPU cannot be named"
)
HOW_TO_SUPPLY_PCIE = (
    "this driver answers GPM PCIE_TX/RX_PER_SEC for the whole GPU only: a driver that answers them per GPU "
    "instance (nvmlGpmMigSampleGet) lets the culprit be named; dcgm-exporter's DCGM_FI_PROF_PCIE_* are per GPU too"
)


@dataclass(slots=True)
class BlindEpisode:
    """A victim degraded while no neighbour's use was known; open while it keeps being flagged."""

    first_tick: int
    since: float
    last_observed: int


def blind_to_neighbours(domain: Domain, victim: str) -> bool:
    """The domain's contention is visible but not one neighbour's use is known (power and PCIe domains only: the
    shares of a time-sliced GPU or a GPU instance are the use itself, so there nothing is visible without them)."""
    if domain.kind is DomainKind.PCIE or domain.kind is DomainKind.MPS:
        if domain.busy is None:
            return False
    elif domain.kind is not DomainKind.POWER or domain.reasons is None or domain.clock_loss is None:
        return False
    return all(use is None for key, use in domain.activity.items() if key != victim)


def culprit_unknown_finding(
    domain: Domain,
    victims: list[tuple[str, BlindEpisode, str]],
    *,
    tick: int,
) -> Finding:
    """One finding per domain: every victim (key, episode, signal source) whose degradation has no named culprit."""
    refs = {ref.key: ref for ref in domain.pods}
    victim_refs = tuple(refs[key] for key, _, _ in victims if key in refs)
    first = min((episode for _, episode, _ in victims), key=lambda e: e.first_tick)
    last_observed = max(episode.last_observed for _, episode, _ in victims)
    neighbours = sorted(key for key in domain.activity if key not in {k for k, _, _ in victims})
    pcie = domain.kind is DomainKind.PCIE
    mps = domain.kind is DomainKind.MPS
    missing = MISSING_PCIE_USE if pcie else MISSING_MPS_USE if mps else MISSING_USE
    evidence: dict[str, float | int | str] = {
        "culprit": "unknown",
        "signal": victims[0][2],
        "victim": victims[0][0],
        "missing": missing,
        "missing_for": ",".join(neighbours),
        "supply": HOW_TO_SUPPLY_PCIE if pcie else HOW_TO_SUPPLY_MPS if mps else HOW_TO_SUPPLY,
    }
    if (pcie or mps) and domain.busy is not None:
        evidence["busy"] = round(domain.busy, 4)
    if domain.clock_loss is not None:
        evidence["clock_loss"] = round(domain.clock_loss, 4)
    if domain.reasons is not None:
        evidence["clock_event_reasons"] = domain.reasons
    return Finding(
        kind=FindingKind.INTERFERENCE_CULPRIT_UNKNOWN,
        key=f"interference-culprit-unknown/{domain.key}",
        domain=domain.key,
        resource=domain.resource,
        severity=Severity.WARNING,
        first_tick=first.first_tick,
        last_tick=last_observed,
        since=first.since,
        victims=victim_refs,
        culprit=None,
        tenant=None,  # the tenant of a finding is the one at fault; nobody is known to be
        evidence=evidence,
        message=(
            f"{', '.join(r.key for r in victim_refs)} degraded on {domain.key} ({domain.resource}, "
            + (f"link {domain.busy or 0:.0%} full" if pcie
               else f"DRAM bandwidth {domain.busy or 0:.0%} used" if mps
               else f"clock loss {domain.clock_loss or 0:.0%}")
            + f"); culprit unknown: no {missing}"
        ),
        observed=last_observed == tick,
        gpu_uuid=domain.gpu.uuid,
    )
