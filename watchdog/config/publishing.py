"""Settings of the publishing stage (Prometheus endpoint)."""

from pydantic import Field

from watchdog.config._base import Section


class PublishingSettings(Section):
    host: str = Field("0.0.0.0", description="Address the metrics/health server binds to.")
    port: int = Field(9435, ge=0, le=65535, description="Port of /metrics, /healthz and /readyz (0 = any free port).")
    gzip: bool = Field(
        True,
        description="Compress /metrics with gzip when the scraper accepts it (Prometheus asks for it): ~14x fewer "
        "bytes for ~1.4 ms more CPU per new snapshot at 56 MIG instances (the compressed body is cached).",
    )
    gzip_level: int = Field(1, ge=1, le=9, description="gzip level of /metrics (1 = fastest; bodies are cached).")
    idle_timeout_seconds: float = Field(
        30.0, gt=0, description="A connection idle this long (before its first request or between requests) is closed."
    )
    max_connections: int = Field(
        32, ge=1, description="Concurrent connections served; when full, idle ones make room and one client holds at "
        "most half; probes get 4 slots beyond it (docs/metrics.md, \"Connections and probes\")."
    )
    process_metrics: bool = Field(
        True, description="Serve the standard process_* metrics (CPU seconds, resident memory, open fds, start time)."
    )
