"""Settings of the fleet what-if API: an agent replaying its own flight recorder under a posted policy.

A policy change is judged best on what every node actually saw; the controller's `gpu-watchdog whatif` asks each
agent to replay its own segments, so nothing but the reports leaves the node. The API is off unless a bearer token
is mounted, and it listens on a port of its own, so a NetworkPolicy can let only the controller reach it while
/metrics stays open to Prometheus (docs/flight-recorder.md, "Fleet what-if").
"""

from __future__ import annotations

from pydantic import Field

from watchdog.config._base import Section
from watchdog.config.limits import MIB


class WhatIfSettings(Section):
    token_file: str | None = Field(
        None, description="File holding the bearer token the controller sends (re-read when it changes); unset: "
        "the what-if API is off."
    )
    listen: str = Field("0.0.0.0", description="Address the what-if API binds to (its own listener, not /metrics').")
    port: int = Field(
        9436, ge=0, le=65535, description="Port of the what-if API (the chart's container port `whatif`; 0 = any free)."
    )
    max_cpu_seconds: float = Field(
        1800.0, gt=0, description="CPU seconds one what-if replay may use; at the bound it ends `cancelled`, with the "
        "partial result of the ticks replayed so far."
    )
    result_ttl_seconds: float = Field(
        3600.0, gt=0, description="How long a finished what-if's status and result stay readable."
    )
    max_results: int = Field(
        8, ge=1, description="Finished what-ifs whose status and result are kept at most (the oldest goes first)."
    )
    max_body_bytes: int = Field(MIB, gt=0, description="Largest request body accepted (larger: HTTP 413).")
