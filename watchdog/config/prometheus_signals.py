"""Where the agent reads tenants' own victim signals (detection.victim_signal_overrides) from."""

from pydantic import Field

from watchdog.config._base import Section


class SignalsSettings(Section):
    prometheus_url: str | None = Field(
        None, description="Prometheus base URL the override queries run against; unset disables overrides."
    )
    refresh_seconds: float = Field(15.0, gt=0, description="Seconds between two evaluations of the queries.")
    timeout_seconds: float = Field(5.0, gt=0, description="Timeout of one query.")
    stale_seconds: float = Field(
        60.0, gt=0, description="A pod's value older than this is dropped (detection then has no override value)."
    )
