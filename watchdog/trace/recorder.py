"""The trace recorder as the agent runs it: a sink that writes each tick it is handed, header first.

The header names the node and the first sample's time, which only the first tick knows, so the file is opened
then. `gpu-watchdog record` hands one of these to the agent as a tick sink; the agent never knows it is recording.
"""

from __future__ import annotations

from pathlib import Path

from watchdog.model import TickResult
from watchdog.trace.io import TraceHeader, TraceWriter


class TraceRecorder:
    """``tick_done`` writes the tick's sample, attribution and victim signals; ticks without a sample are skipped."""

    stage = "trace"

    def __init__(self, target: str | Path, *, tick_seconds: float, source: str) -> None:
        self.target = target
        self.tick_seconds = tick_seconds
        self.source = source
        self.writer: TraceWriter | None = None

    def tick_done(self, result: TickResult) -> None:
        sample, attribution = result.sample, result.attribution
        if sample is None or attribution is None:
            return
        if self.writer is None:
            header = TraceHeader(node=sample.node, tick_seconds=self.tick_seconds, started=sample.timestamp,
                                 source=self.source)
            self.writer = TraceWriter(self.target, header=header)
        self.writer.write(sample, attribution, result.signals or None, borrowed_activity=result.activity or None)

    @property
    def ticks_written(self) -> int:
        return self.writer.ticks_written if self.writer is not None else 0

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
