"""The MPS client memory-limit policy: how close to its pinned device-memory limit a client may come unreported.

Apart from config/detection.py only to keep that module readable; DetectionPolicy holds it as ``mps``. With the
device plugin's MPS sharing a client's allocations beyond its limit (the GPU's memory / replicas) fail: the limit
protects the other clients, so a client near it hurts only itself, and the finding is report-only (a warning for
its owner, never an eviction reason).
"""

from __future__ import annotations

from pydantic import Field

from watchdog.config._base import Section


class MpsMemoryPolicy(Section):
    """A client of an MPS-limited GPU near its pinned device-memory limit (detection/mps_memory.py)."""

    enabled: bool = Field(True, description="Report MPS clients near their pinned device-memory limit at all.")
    limit_ratio: float = Field(
        0.95,
        gt=0,
        le=1,
        description="A client is near its limit at this share of it (its processes' used memory summed).",
    )
    band_ratio: float = Field(
        0.03, ge=0, lt=1, description="The finding ends only below limit_ratio − this share of the limit."
    )
    for_ticks: int = Field(3, ge=1, description="Consecutive ticks near the limit before it is a finding.")
    stale_ticks: int = Field(
        60, ge=1, description="Drop a finding, and forget a client, after this many ticks without a reading."
    )
