"""One interference finding from the episodes open against one culprit in one domain: severity and evidence.

Pure (no I/O). Kept apart from `interference`, which decides who is a victim and who the culprit, so the per-tick
logic there reads without the shape of what is reported; docs/detection.md ("Severity: what may be acted
on", "Interference") says why each field is there.
"""

from __future__ import annotations

from typing import Callable

from watchdog.config.detection import InterferencePolicy
from watchdog.detection.domain_types import TIME_SLICED, DomainKind
from watchdog.detection.episodes import DomainState, PodState
from watchdog.detection.vgpu import vmis_by_pod
from watchdog.model import Attribution, Finding, FindingKind, PodRef, Severity

Z_SCORE_CAP = 1e6  # evidence z_score is at most this; above it, z_score_capped says why (docs/detection.md)


def interference_finding(
    state: DomainState,
    culprit_key: str,
    victims: list[tuple[str, PodState]],
    attribution: Attribution,
    *,
    tick: int,
    policy: InterferencePolicy,
    tenant_of: Callable[[PodRef], str],
    borrowed: bool = False,
) -> Finding:
    """The finding of one (domain, culprit): every victim latched to it, evidence from the worst of them.
    ``borrowed``: some of the GPU's activity this tick came from outside NVML (detection/borrowed.py)."""
    domain = state.domain
    worst_key, worst = max(victims, key=lambda item: item[1].deviation)
    episode = worst.episode
    assert episode is not None
    culprit = episode.culprit
    info = attribution.pod(culprit)
    refs = {ref.key: ref for ref in domain.pods}
    victim_refs = tuple(refs[k] for k, _ in victims if k in refs)
    episodes = [pod.episode for _, pod in victims if pod.episode is not None]
    first = min(episodes, key=lambda e: e.first_tick)
    last_observed = max(e.last_observed for e in episodes)
    # Only the clock loss of the power domain is measured damage. A share that fell on a time-sliced GPU or a
    # GPU instance may be the pod's own demand falling (NVML cannot see unmet demand), so those findings are
    # report-only unless the victim's tenant supplied its own signal (docs/detection.md, "Severity").
    overridden = any(pod.source == "override" for _, pod in victims)
    # The GPU-instance domain judges DRAM by an SM-activity proxy (GPM gives DRAM per GI only): report-only
    # unless the tenant's own signal says it suffers. Power, time-slicing and the PCIe link (its load and
    # every GI's share measured, the victim's idle SMs its damage) rest on direct NVML evidence.
    critical = domain.kind is not DomainKind.GPU_INSTANCE or overridden
    evidence: dict[str, float | int | str] = {
        "z_score": round(min(worst.z_score, Z_SCORE_CAP), 3),
        "deviation": round(worst.deviation, 4),
        "baseline_mean": round(worst.baseline.mean, 4),
        "baseline_std": round(worst.baseline.std, 4),
        "correlation": round(episode.correlation, 3),
        "antagonist_rise": round(episode.rise, 3),
        "window": policy.correlation_window,
        "flags": worst.flags.bit_count(),
        "flags_window": policy.flags_window,
        "signal": "override" if overridden else worst.source,
        "victim": worst_key,
    }
    if worst.z_score > Z_SCORE_CAP:
        # A baseline without spread (σ = 0: the victim held one level exactly, as a simulated pod can) makes any
        # drop infinitely many σ; z_score is capped so JSON can carry it, and this says it measures nothing.
        evidence["z_score_capped"] = True
    if domain.activity.get(culprit_key) is not None:
        evidence["antagonist_use"] = round(float(domain.activity[culprit_key]), 4)
    if domain.kind is DomainKind.POWER:
        evidence["excluded_rise"] = round(episode.excluded_rise, 4)
    if worst.fair is not None:
        evidence["fair_share"] = round(worst.fair, 4)
    if domain.kind in TIME_SLICED:
        evidence["scheduler"] = "proportional" if state.scheduler.proportional else "roundrobin"
    if domain.kind is DomainKind.VGPU and domain.gpu.vgpu_scheduler:
        evidence["vgpu_scheduler"] = domain.gpu.vgpu_scheduler  # NVML's policy, beside the model learned above
    if domain.kind is DomainKind.MPS:
        evidence["active_thread_share"] = round(domain.share.get(worst_key, 0.0), 4)
        own = domain.victim_activity.get(worst_key) if domain.victim_activity else None
        if own is not None:
            evidence["victim_sm_of_slice"] = round(own, 4)
    if domain.clock_loss is not None:
        evidence["clock_loss"] = round(domain.clock_loss, 4)
    if domain.busy is not None:
        evidence["busy"] = round(domain.busy, 4)
    if domain.kind is DomainKind.PCIE and domain.gpu.pcie_link_bytes_per_second:
        evidence["link_bytes_per_second"] = round(domain.gpu.pcie_link_bytes_per_second)
    if info is not None:
        evidence["culprit_priority"] = info.priority
    if borrowed:
        evidence["activity_source"] = "dcgm-exporter"
    if attribution.vgpus:
        # A launcher pod stands for its VM: name the VMIs, which is what the VMs' owners know them by.
        vmis = vmis_by_pod(attribution)
        if culprit_key in vmis:
            evidence["culprit_vmi"] = vmis[culprit_key]
        victim_vmis = [vmis[ref.key] for ref in victim_refs if ref.key in vmis]
        if victim_vmis:
            evidence["vmi"] = ",".join(victim_vmis)
    scaled = domain.kind is not DomainKind.MPS  # an MPS client's DRAM share is of the whole GPU already
    usage = {
        key: round(float(act) * (domain.share.get(key, 1.0) if scaled else 1.0), 4)
        for key, act in domain.activity.items()
        if act is not None
    }
    return Finding(
        kind=FindingKind.INTERFERENCE,
        key=f"interference/{domain.key}/{culprit_key}",
        domain=domain.key,
        resource=domain.resource,
        severity=Severity.CRITICAL if critical else Severity.WARNING,
        first_tick=first.first_tick,
        last_tick=last_observed,
        since=first.since,
        victims=victim_refs,
        culprit=refs.get(culprit_key, culprit),
        tenant=tenant_of(culprit),
        evidence=evidence,
        usage=usage,
        message=(
            f"{culprit_key} degrades {', '.join(r.key for r in victim_refs)} on {domain.key} "
            f"({domain.resource}, r={episode.correlation:.2f})"
        ),
        observed=last_observed == tick,
        gpu_uuid=domain.gpu.uuid,  # every sharing domain lies within one GPU (detection/domains.py)
    )

