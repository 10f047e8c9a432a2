"""Settings of the flight recorder: the last hours of ticks kept on the node's disk, bounded in bytes and age.

An incident is best explained by replaying what the node saw (docs/flight-recorder.md), so ``run`` can keep a
rolling trace. Every limit has a default and none can be switched off: the recorder must never fill a node's disk.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from watchdog.config._base import Section

MIB = 1024 * 1024


class FlightRecorderSettings(Section):
    enabled: bool = Field(False, description="Keep a rolling trace of the last ticks on disk (`run` only).")
    directory: str = Field(
        "/var/lib/gpu-watchdog/flight", description="Directory of the segments (a hostPath or emptyDir volume)."
    )
    max_bytes: int = Field(
        512 * MIB, gt=0, description="Most bytes all segments may take on disk; the oldest segment is deleted first."
    )
    max_age_seconds: float = Field(
        6 * 3600.0, gt=0, description="Ticks older than this are deleted, a whole segment at a time."
    )
    segment_bytes: int = Field(16 * MIB, gt=0, description="A segment is closed and a new one begun past this size.")
    segment_seconds: float = Field(
        900.0, gt=0, description="A segment is closed and a new one begun after this many seconds of ticks."
    )
    compress: bool = Field(True, description="Write gzip segments (.jsonl.gz, about 3 KB per tick at 56 instances).")

    @model_validator(mode="after")
    def _segment_fits(self) -> FlightRecorderSettings:
        if self.segment_bytes > self.max_bytes:
            raise ValueError("segment_bytes must not exceed max_bytes (one segment alone would break the limit)")
        return self
