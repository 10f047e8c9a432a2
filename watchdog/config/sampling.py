"""Settings of the NVML sampling stage."""

from pydantic import Field

from watchdog.config._base import Section
from watchdog.model.plausibility import DEFAULT_QUARANTINE_TICKS


class SamplingSettings(Section):
    interval_seconds: float = Field(1.0, gt=0.05, le=300, description="Seconds between two pipeline cycles (ticks).")
    gpm_min_interval_seconds: float = Field(
        0.1, ge=0.1, description="GPM samples closer than this are not diffed (NVML needs >100 ms)."
    )
    sample_timeout_seconds: float = Field(
        10.0, gt=0, description="A sample still running after this fails its cycle; no second one starts meanwhile."
    )
    events: bool = Field(True, description="Watch Xid/ECC/MIG-change events in a dedicated thread.")
    event_wait_ms: int = Field(1000, ge=10, le=5000, description="Bounded wait of nvmlEventSetWait, so stop is prompt.")
    lost_retry_seconds: float = Field(
        30.0, gt=0, description="After NVML said GpuIsLost, seconds before that GPU is asked again."
    )
    process_util_hold_seconds: float = Field(
        5.0, ge=0, description="Keep a process's last SM/memory share this long while NVML has no newer sample."
    )
    vgpu_scheduler_log_every_ticks: int = Field(
        10, ge=1, description="Read a vGPU host's scheduler log (nvmlDeviceGetVgpuSchedulerLog) every this many ticks."
    )
    quarantine_ticks: int = Field(
        DEFAULT_QUARANTINE_TICKS, ge=0, le=86_400,
        description="After an implausible reading, plausible ticks a device must read before detection judges it.",
    )
