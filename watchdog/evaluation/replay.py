"""`gpu-watchdog replay`: re-run detection and the eviction rules on a recorded trace, offline and deterministically.

This is how a finding (or a missed one) is explained after the fact, and how a policy change is tried before it is
rolled out: the same trace with two policies gives two reports to compare. Nothing here talks to Kubernetes; the
only inputs are the trace and the policy, so the same pair always gives the same report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from watchdog.config import Policy
from watchdog.evaluation.report import ReportBuilder
from watchdog.evaluation.stages import OfflineAgent, StepResult
from watchdog.model.plausibility import PlausibilityGate
from watchdog.trace import read_trace

TRACE_SUFFIXES = (".jsonl", ".jsonl.gz")


def trace_files(path: str | Path) -> list[Path]:
    """``path`` itself, or for a directory (flight-recorder segments) its traces in name order, i.e. time order."""
    path = Path(path)
    if not path.is_dir():
        return [path]
    found = sorted(item for item in path.iterdir() if item.name.endswith(TRACE_SUFFIXES))
    if not found:
        raise FileNotFoundError(2, "no .jsonl or .jsonl.gz trace in the directory", str(path))
    return found


def replay(
    trace_path: str | Path, *, policy: Policy, own_namespace: str | None = "gpu-watchdog",
    tenant_label: str | None = None, on_step: Callable[[StepResult], None] | None = None,
    on_bytes: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """The report (docs/report-format.md) of ``policy`` applied to every tick of the trace at ``trace_path`` — a
    file, or a directory of segments replayed in order through one offline agent. ``on_step`` sees every tick's
    result (progress, plots); ``on_bytes`` is told (bytes read so far, bytes in all) after every tick (an ETA).

    Raises ``TraceError`` ("FILE:LINE: field: reason") at the first invalid line, ``OSError`` if unreadable.
    """
    gate = PlausibilityGate()  # one quarantine across a directory's segments, as one agent kept it
    traces = [read_trace(path, gate=gate) for path in trace_files(trace_path)]
    header = traces[0].header
    source = {
        "path": str(trace_path),
        "node": header.node,
        "tick_seconds": header.tick_seconds,
        "started": header.started,
        "agent_version": header.agent_version,
        "source": header.source,
    }
    agent = OfflineAgent(policy, own_namespace=own_namespace, tenant_label=tenant_label,
                         tick_seconds=header.tick_seconds)
    builder = ReportBuilder(source=source, mode=policy.action.mode.value)
    total, done = sum(trace.path.stat().st_size for trace in traces), 0
    for trace in traces:
        for record in trace:
            step = agent.step(record.sample, record.attribution, record.external_signals,
                              borrowed_activity=record.borrowed_activity)
            builder.add(step)
            if on_step is not None:
                on_step(step)
            if on_bytes is not None:
                on_bytes(done + trace.bytes_read(), total)
        done += trace.path.stat().st_size
    return builder.finish()
