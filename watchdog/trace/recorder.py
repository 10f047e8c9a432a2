"""The trace recorder as the agent runs it: a sink that writes each tick it is handed, header first.

The header names the node and the first sample's time, which only the first tick knows, so the file is opened
then. It also names the policy in force, which the agent hands every policy consumer on each load
(``apply_runtime``), so a replay of the trace applies what the agent applied. `gpu-watchdog record` hands one of
these to the agent as a tick sink; the agent never knows it is recording.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from watchdog.config.runtime import RuntimePolicy
from watchdog.model import TickResult
from watchdog.trace.io import TraceHeader, TraceWriter, policy_json

log = logging.getLogger(__name__)


class TraceRecorder:
    """``tick_done`` writes the tick's sample, attribution and victim signals; ticks without a sample are skipped.

    One file has one header, so a policy reloaded while recording cannot be written into it: the header keeps the
    policy in force at the first tick, and the reload is logged with the tick it took effect at (replay the ticks
    after it with ``--policy``). The flight recorder, which can, begins a new segment instead.
    """

    stage = "trace"

    def __init__(self, target: str | Path, *, tick_seconds: float, source: str) -> None:
        self.target = target
        self.tick_seconds = tick_seconds
        self.source = source
        self.writer: TraceWriter | None = None
        self.policy: dict[str, Any] | None = None  # policy_json of the policy in force; None: never told one
        self._reloaded = False

    def apply_runtime(self, runtime: RuntimePolicy) -> None:
        """A policy load (the first one included): recorded in the header if no tick was written yet."""
        policy = policy_json(runtime.policy)
        if policy != self.policy:
            self.policy = policy
            self._reloaded = self.writer is not None and policy != self.writer.header.policy

    def tick_done(self, result: TickResult) -> None:
        sample, attribution = result.sample, result.attribution
        if sample is None or attribution is None:
            return
        if self.writer is None:
            header = TraceHeader(node=sample.node, tick_seconds=self.tick_seconds, started=sample.timestamp,
                                 source=self.source, policy=self.policy)
            self.writer = TraceWriter(self.target, header=header)
        elif self._reloaded:
            self._reloaded = False
            log.warning("trace %s: the policy was reloaded before tick %d; the header keeps the one in force at "
                        "the start (replay from tick %d with --policy to apply the new one)",
                        self.target, sample.tick, sample.tick)
        self.writer.write(sample, attribution, result.signals or None, borrowed_activity=result.activity or None)

    @property
    def ticks_written(self) -> int:
        return self.writer.ticks_written if self.writer is not None else 0

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
