"""The detection policy: what counts as interference, memory pressure, a quota breach, unauthorized use, a bad Xid.

It lives in config (not in watchdog.detection) because the policy file, `gpu-watchdog replay` and the evaluation
all load it and it must be validated, with errors naming the field, before any stage runs. Durations are in
*ticks* (one sampling interval each, 1 s by default) so that a recorded run replays to the same findings whatever
the machine's speed; the two exceptions are named `…_seconds` and compare timestamps carried by the data itself
(`unauthorized.min_pod_age_seconds`: the sample's time against the pod's creationTimestamp; `xid.hold_seconds`: the
sample's time against the event's). Defaults favour precision: a false finding may become a wrongful eviction.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints, model_validator

from watchdog.config._base import Section
from watchdog.config import limits
from watchdog.config.detection_mps import MpsMemoryPolicy
from watchdog.config.names import LabelKey, LabelValue, LabelValueOrEmpty, NamespaceName

# A tenant is a namespace or a tenant label's value (watchdog.model.pods.PodInfo.tenant); a namespace name is also a
# valid label value, so the label value syntax covers both.
TenantName = LabelValue
# NVML's MIG profile names: "1g.10gb", "1g.10gb+me", "1c.3g.40gb".
ProfileName = Annotated[str, StringConstraints(min_length=1, max_length=limits.MAX_PROFILE_CHARACTERS,
                                               pattern=r"^[A-Za-z0-9][A-Za-z0-9.+_-]*$")]
Pattern = Annotated[str, StringConstraints(min_length=1, max_length=limits.MAX_PATTERN_CHARACTERS)]

# nvmlClocksEventReason* bits that mean "the GPU's own power/thermal budget slowed the clocks" (nvml.h,
# nvmlClocksEventReason* defines): SwPowerCap 0x4 and SwThermalSlowdown 0x20, which the driver raises when the board's
# draw or temperature reaches its limit, i.e. when the work on the GPU spends the budget. Left out: HwSlowdown 0x8,
# HwThermalSlowdown 0x40 and HwPowerBrakeSlowdown 0x80, which nvml.h documents as external or node-level causes (an
# external power-brake signal from the system, the board's hardware slowdown) that no tenant can be blamed for;
# GpuIdle (0x1), application/display clock settings and SyncBoost are not contention at all.
SW_POWER_CAP = 0x4
SW_THERMAL_SLOWDOWN = 0x20
DEFAULT_CONTENTION_REASONS = SW_POWER_CAP | SW_THERMAL_SLOWDOWN


class InterferencePolicy(Section):
    """CPI²-style: a victim leaves its own baseline, then an antagonist is found by correlation."""

    enabled: bool = Field(True, description="Look for cross-tenant interference at all.")
    k_sigma: float = Field(
        3.0, gt=0, description="A victim's signal must exceed its baseline mean by k standard deviations."
    )
    min_deviation: float = Field(
        0.05,
        ge=0,
        description="Least absolute deviation (0–1 signal units) that counts, so a flat baseline ignores noise.",
    )
    flags_needed: int = Field(3, ge=1, description="N: outlier ticks needed among the last M to call a pod a victim.")
    flags_window: int = Field(5, ge=1, le=64, description="M: ticks over which the N outliers are counted.")
    clear_flags: int = Field(
        2, ge=1, description="An open finding stays while at least this many of the last M ticks are outliers."
    )
    baseline_alpha: float = Field(0.05, gt=0, lt=1, description="EWMA weight of a new unhindered tick in the baseline.")
    baseline_min_ticks: int = Field(
        10, ge=2, description="Unhindered active ticks a pod needs before it can be a victim (no baseline, no victim)."
    )
    correlation_window: int = Field(24, ge=5, le=600, description="W: ticks over which antagonist use is correlated.")
    min_correlation: float = Field(
        0.5, gt=0, le=1, description="Least Pearson correlation of antagonist use and victim signal."
    )
    min_points: int = Field(8, ge=3, description="Least ticks with both values present for a correlation to count.")
    min_steady_ticks: int = Field(
        4, ge=1, description="Unflagged ticks, victim active, needed in the window before its degradation."
    )
    min_antagonist_use: float = Field(
        0.3,
        gt=0,
        le=1,
        description="Least antagonist use, relative to its own instance (or the whole GPU when time-sliced).",
    )
    min_antagonist_rise: float = Field(
        0.15,
        ge=0,
        le=1,
        description="Antagonist use must be this much higher while the victim degrades than while it was steady.",
    )
    steady_tolerance: float = Field(
        0.2,
        ge=0,
        le=1,
        description="Power domain: the victim's own activity may rise by at most this (and by at most this share "
        "of its steady level) between its steady and its degraded ticks; a fall is allowed (a cap shrinks work done).",
    )
    victim_min_activity: float = Field(
        0.1,
        ge=0,
        le=1,
        description="A pod is only a victim while its own SM activity is at least this (it is still working).",
    )
    saturation: float = Field(
        0.9,
        gt=0,
        le=1,
        description="Time-sliced GPU: busy share (gpu util or Σ process SM shares) that means contended.",
    )
    dram_saturation: float = Field(
        0.8,
        gt=0,
        le=1,
        description="GPU instance with several compute instances: DRAM bandwidth use that means contended.",
    )
    pcie_saturation: float = Field(
        0.75,
        gt=0,
        le=1,
        description="MIG GPU's PCIe link: the busier direction's throughput over the link's encoded rate (current "
        "generation × width) that means contended; transfers top out near 80 % of it (TLP overhead).",
    )
    contention_reasons: int = Field(
        DEFAULT_CONTENTION_REASONS,
        ge=1,
        description="nvmlClocksEventReason bit mask meaning the power/thermal budget is contended.",
    )
    fair_share_tolerance: float = Field(
        0.02,
        ge=0,
        le=1,
        description="Time-sliced GPU: a pod can be a victim only while its use is held within this of its "
        "water-filling fair level (0–1 of its own share); a pod further below it got all it asked for.",
    )
    scheduler_evidence_ticks: int = Field(
        90,
        ge=1,
        description="Time-sliced GPU whose contention began by a gradual ramp: for this many ticks after the GPU's "
        "last idle tick, a pod below its fair level losing what it then had while a neighbour gains is evidence "
        "that the scheduler follows demand (detection/scheduler_model.py).",
    )
    common_driver_correlation: float = Field(
        0.3,
        gt=0,
        le=1,
        description="A neighbour whose use moved with the victim's own on the victim's uncontended ticks (EWMA "
        "correlation at least this) shares a driver with it (diurnal traffic, lock-step jobs) and is never named.",
    )
    release_low_ticks: int = Field(
        4,
        ge=1,
        description="N: an open episode closes once its culprit's use was below half of min_antagonist_use on N of "
        "the last M ticks (a checkpoint pause of a few ticks does not close it).",
    )
    release_window: int = Field(6, ge=1, le=64, description="M: ticks over which the culprit's low ticks are counted.")
    merge_gap_ticks: int = Field(
        60,
        ge=0,
        description="A victim re-latched to the same culprit in the same domain within this many ticks of the last "
        "episode's end continues that finding (same first_tick and since): intermittent interference persists.",
    )
    cross_tenant_only: bool = Field(True, description="Ignore antagonists of the victim's own tenant.")
    stale_ticks: int = Field(120, ge=1, description="Forget a pod's learned state after this many ticks unseen.")

    @model_validator(mode="after")
    def _counts_fit(self) -> InterferencePolicy:
        if self.flags_needed > self.flags_window:
            raise ValueError(f"flags_needed ({self.flags_needed}) must be ≤ flags_window ({self.flags_window})")
        if self.clear_flags > self.flags_needed:
            raise ValueError(f"clear_flags ({self.clear_flags}) must be ≤ flags_needed ({self.flags_needed})")
        if self.release_low_ticks > self.release_window:
            raise ValueError(
                f"release_low_ticks ({self.release_low_ticks}) must be ≤ release_window ({self.release_window})"
            )
        if self.min_points > self.correlation_window:
            raise ValueError(
                f"min_points ({self.min_points}) must be ≤ correlation_window ({self.correlation_window})"
            )
        return self


class MemoryPressurePolicy(Section):
    """Free memory of a device shared by ≥ 2 pods (time-sliced GPU, MIG instance), with a hysteresis band."""

    enabled: bool = Field(True, description="Look for memory pressure on shared devices at all.")
    min_free_bytes: int = Field(
        1 << 30, ge=0, description="Pressure when free memory (total − used − reserved) is below this …"
    )
    min_free_ratio: float = Field(
        0.05, ge=0, lt=1, description="… or below this share of the device's memory (the larger wins)."
    )
    band_bytes: int = Field(512 << 20, ge=0, description="Pressure ends only above threshold + this band (bytes) …")
    band_ratio: float = Field(
        0.02, ge=0, lt=1, description="… or + this share of the device's memory (the larger wins)."
    )
    for_ticks: int = Field(3, ge=1, description="Consecutive ticks below threshold before it is a finding.")
    growth_window: int = Field(
        30, ge=2, le=600, description="Ticks over which each pod's memory growth is measured (culprit)."
    )
    min_growth_share: float = Field(
        0.1,
        ge=0,
        le=1,
        description="The grower is the culprit only when its growth is at least this share of `needed` (and it is "
        "above its request, when one is known); else the first pod in relief order is.",
    )
    stale_ticks: int = Field(
        60, ge=1, description="Drop a finding, and forget a pod, after this many ticks without a reading."
    )


class TenantQuota(Section):
    """One tenant's limits on this node; an unset limit is not checked."""

    gpu_memory_bytes: int | None = Field(
        None, ge=0, description="GPU memory summed over the tenant's pods on this node."
    )
    dram_share: float | None = Field(
        None, gt=0, le=1, description="Share of a time-sliced GPU's DRAM time (Σ process memory util) per GPU."
    )
    instances: dict[ProfileName, int] = Field(
        default_factory=dict, max_length=limits.MAX_PROFILES,
        description="Most MIG instances per profile, e.g. {'1g.10gb': 2}.",
    )

    @model_validator(mode="after")
    def _instances_non_negative(self) -> TenantQuota:
        for profile, limit in self.instances.items():
            if limit < 0:
                raise ValueError(f"instances[{profile!r}] must be ≥ 0, got {limit}")
        return self


class QuotaPolicy(Section):
    """Per-tenant limits, checked by observation (no LD_PRELOAD)."""

    enabled: bool = Field(True, description="Check tenant quotas at all.")
    tenants: dict[TenantName, TenantQuota] = Field(
        default_factory=dict, max_length=limits.MAX_TENANTS, description="Limits per tenant name."
    )
    memory_warning_ratio: float | None = Field(
        0.9,
        gt=0,
        le=1,
        description="Warn (never act) when a MIG instance's used memory exceeds this share of its size.",
    )
    for_ticks: int = Field(5, ge=1, description="Consecutive ticks a breach must hold before it is a finding.")
    stale_ticks: int = Field(60, ge=1, description="Drop a breach after this many ticks it could not be judged.")


# The NVIDIA GPU operator's validator and device-plugin pods see every GPU on purpose (its default namespaces are
# gpu-operator and nvidia-gpu-operator); kube-system hosts node agents such as DCGM and the device plugin itself.
DEFAULT_EXEMPT_NAMESPACES = ("gpu-operator", "nvidia-gpu-operator", "kube-system")


# Node agents that open every GPU by design, outside any pod when installed on the host: DCGM's host engine
# (nv-hostengine; unit nvidia-dcgm.service), the persistence daemon (nvidia-persistenced, whose comm the kernel cuts to
# 15 characters), the device plugin run as a host service, and nvidia-smi / dcgm-exporter on the host. Patterns are
# fnmatch (shell globs), matched against the whole comm / cgroup path.
DEFAULT_EXEMPT_COMMANDS: tuple[str, ...] = (
    "nv-hostengine", "nvidia-persiste*", "nvidia-device-*", "nvidia-smi", "dcgm-exporter", "dcgmi",
)
DEFAULT_EXEMPT_CGROUPS: tuple[str, ...] = (
    "*/nvidia-persistenced.service", "*/nvidia-dcgm.service", "*/dcgm.service", "*/nvidia-fabricmanager.service",
    "*/nvidia-device-plugin*.service",
)


class UnauthorizedPolicy(Section):
    """A process on a device the kubelet never gave its pod."""

    enabled: bool = Field(True, description="Look for unauthorized device use at all.")
    for_ticks: int = Field(
        5, ge=1, description="Consecutive ticks seen before a finding (the kubelet's assignments are refreshed slowly)."
    )
    min_pod_age_seconds: float = Field(
        30.0, ge=0, description="Ignore pods younger than this: their assignment may not be listed yet."
    )
    exempt_namespaces: tuple[NamespaceName, ...] = Field(
        DEFAULT_EXEMPT_NAMESPACES,
        max_length=limits.MAX_NAMESPACES,
        description="Namespaces whose pods may use any device (GPU-operator validators run with "
        "NVIDIA_VISIBLE_DEVICES=all).",
    )
    exempt_labels: dict[LabelKey, LabelValueOrEmpty] = Field(
        default_factory=dict,
        max_length=limits.MAX_SELECTOR_LABELS,
        description="Label selector (matchLabels: every pair must match): pods it selects may use any device.",
    )
    stale_ticks: int = Field(
        60, ge=1, description="Drop a finding after this many ticks it could not be judged (GPU or kubelet missing)."
    )
    host_processes: bool = Field(
        True, description="Report processes in no pod (docker run --gpus, host tools) on devices given to pods."
    )
    exempt_commands: tuple[Pattern, ...] = Field(
        DEFAULT_EXEMPT_COMMANDS,
        max_length=limits.MAX_PATTERNS,
        description="fnmatch patterns of /proc/<pid>/comm (15 characters at most): node agents allowed on any device.",
    )
    exempt_cgroups: tuple[Pattern, ...] = Field(
        DEFAULT_EXEMPT_CGROUPS, max_length=limits.MAX_PATTERNS,
        description="fnmatch patterns of cgroup paths of node agents allowed on any device.",
    )
    host_critical_ratio: float = Field(
        0.25, gt=0, le=1,
        description="A process in no pod taking this share of the device's memory or SM time is CRITICAL, else "
        "WARNING (report only either way: there is no pod to evict).",
    )


# Sources: application-level Xids = the NVIDIA k8s-device-plugin's default ignore list (internal/rm/health.go; HAMi
# ignores the same set). Xid 94 is a contained ECC error: NVIDIA's A100+ memory documentation
# (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt) says it kills only the affected application and the GPU keeps
# serving. Reset/drain set: the commonly used drain/reset set (48 DBE, 63/64 row-remap, 74 NVLink, 79 fallen off
# the bus, 92 high SBE rate, 95 uncontained ECC, 119/120 GSP) — not verified against NVIDIA's Xid catalog
# (docs.nvidia.com/deploy/xid-errors), hence configurable.
DEFAULT_APPLICATION_XIDS = (13, 31, 43, 45, 68, 109)
DEFAULT_CONTAINED_XIDS = (94,)
DEFAULT_RESET_XIDS = (48, 63, 64, 74, 79, 92, 95, 119, 120)


class XidDetectionPolicy(Section):
    """How Xid events are classified and how long a finding about one stays open."""

    enabled: bool = Field(True, description="Report Xid faults at all.")
    application: tuple[int, ...] = Field(
        DEFAULT_APPLICATION_XIDS, max_length=limits.MAX_XIDS, description="Xids caused by the application itself."
    )
    contained: tuple[int, ...] = Field(
        DEFAULT_CONTAINED_XIDS, max_length=limits.MAX_XIDS,
        description="Xids that killed only the affected application (contained ECC).",
    )
    reset: tuple[int, ...] = Field(
        DEFAULT_RESET_XIDS, max_length=limits.MAX_XIDS, description="Xids after which the GPU needs a reset or a drain."
    )
    ignore: tuple[int, ...] = Field((), max_length=limits.MAX_XIDS, description="Xids never reported.")
    drain: bool = Field(False, description="Mark reset-class findings as wanting a drain (the action stage decides).")
    hold_seconds: float = Field(
        300.0, gt=0, description="A finding stays open this long after the last matching event."
    )

    @model_validator(mode="after")
    def _disjoint(self) -> XidDetectionPolicy:
        seen: dict[int, str] = {}
        for name in ("application", "contained", "reset"):
            for xid in getattr(self, name):
                if xid <= 0:
                    raise ValueError(f"{name}: Xid {xid} must be positive")
                if xid in seen:
                    raise ValueError(f"Xid {xid} is listed in both {seen[xid]} and {name}")
                seen[xid] = name
        return self


class VictimSignalOverride(Section):
    """A tenant's own victim signal (e.g. p99 latency), evaluated by the service and handed to detection."""

    query: str = Field(
        ..., min_length=1, max_length=limits.MAX_QUERY_CHARACTERS,
        description="PromQL giving one value per pod (labels namespace, pod).",
    )
    threshold: float | None = Field(None, description="A value beyond this is an outlier even within k·σ (an SLO).")
    higher_is_worse: bool = Field(True, description="False for throughput-like signals where a drop is degradation.")
    min_deviation: float = Field(
        0.0, ge=0, description="Least absolute deviation from the baseline, in the query's unit."
    )
    min_relative_deviation: float = Field(
        0.2, ge=0, description="Least deviation as a share of the baseline mean (the larger of the two wins)."
    )


class DetectionPolicy(Section):
    """Everything detection decides on; hot-reloadable."""

    interference: InterferencePolicy = Field(
        default_factory=InterferencePolicy, description="Cross-tenant interference."
    )
    memory_pressure: MemoryPressurePolicy = Field(
        default_factory=MemoryPressurePolicy, description="Memory pressure on shared devices."
    )
    quota: QuotaPolicy = Field(default_factory=QuotaPolicy, description="Per-tenant quotas.")
    mps: MpsMemoryPolicy = Field(
        default_factory=MpsMemoryPolicy, description="MPS clients near their pinned device-memory limit."
    )
    unauthorized: UnauthorizedPolicy = Field(default_factory=UnauthorizedPolicy, description="Unauthorized device use.")
    xid: XidDetectionPolicy = Field(default_factory=XidDetectionPolicy, description="Xid fault classification.")
    victim_signal_overrides: dict[TenantName, VictimSignalOverride] = Field(
        default_factory=dict, max_length=limits.MAX_SIGNAL_OVERRIDES,
        description="Per tenant: a victim signal replacing the NVML-derived one.",
    )
