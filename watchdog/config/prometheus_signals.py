"""Where the agent reads tenants' own victim signals (detection.victim_signal_overrides) from, and the cluster's
per-MIG-instance activity it borrows where NVML has none (A100/A30 in MIG mode: no GPM)."""

from pydantic import Field

from watchdog.config._base import Section


class BorrowedActivitySettings(Section):
    """dcgm-exporter's DCGM profiling fields per GPU instance, read from the same Prometheus as the victim signals.

    The defaults are dcgm-exporter's names (its default-counters.csv / dcp-metrics-included.csv fields, labels
    ``UUID`` = the parent GPU's UUID and ``GPU_I_ID`` = the GPU instance id). ``$gpus`` in a query is replaced by
    a regular expression matching the node's GPUs that need it, so each agent reads only its own series.
    """

    enabled: bool = Field(
        False, description="Borrow per-instance activity from Prometheus for MIG devices NVML gives none for."
    )
    sm_query: str | None = Field(
        'DCGM_FI_PROF_SM_ACTIVE{UUID=~"$gpus"}', description="PromQL for SM activity 0–1 per GPU instance; null: off."
    )
    dram_query: str | None = Field(
        'DCGM_FI_PROF_DRAM_ACTIVE{UUID=~"$gpus"}', description="PromQL for DRAM activity 0–1 per GPU instance."
    )
    graphics_query: str | None = Field(
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{UUID=~"$gpus"}',
        description="PromQL for graphics-engine activity 0–1 per GPU instance, used where SM activity is missing.",
    )
    gpu_label: str = Field("UUID", min_length=1, description="Label holding the (parent) GPU's UUID.")
    gpu_instance_label: str = Field("GPU_I_ID", min_length=1, description="Label holding the GPU instance id.")


class SignalsSettings(Section):
    prometheus_url: str | None = Field(
        None, description="Prometheus base URL the override queries run against; unset disables overrides."
    )
    refresh_seconds: float = Field(15.0, gt=0, description="Seconds between two evaluations of the queries.")
    timeout_seconds: float = Field(5.0, gt=0, description="Timeout of one query.")
    stale_seconds: float = Field(
        60.0, gt=0, description="A pod's value older than this is dropped (detection then has no override value)."
    )
    borrowed_activity: BorrowedActivitySettings = Field(
        default_factory=BorrowedActivitySettings, description="Per-instance activity borrowed from dcgm-exporter."
    )
