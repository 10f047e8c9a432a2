"""`gpu-watchdog replay`: re-run detection and the eviction rules on a recorded trace, offline and deterministically.

This is how a finding (or a missed one) is explained after the fact, and how a policy change is tried before it is
rolled out: the same trace with two policies gives two reports to compare. Nothing here talks to Kubernetes; the
only inputs are the trace and the policy (by default the one the trace recorded), so the same pair always gives
the same report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from watchdog.config import Policy
from watchdog.evaluation.replay_policy import DEFAULTS, FROM_TRACE, recorded_policy
from watchdog.evaluation.report import ReportBuilder
from watchdog.evaluation.stages import OfflineAgent, StepResult
from watchdog.model.plausibility import PlausibilityGate
from watchdog.trace import Trace, TraceRecord, read_trace

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
    trace_path: str | Path, *, policy: Policy | None = None, policy_source: str = "given",
    own_namespace: str | None = "gpu-watchdog", tenant_label: str | None = None,
    on_step: Callable[[StepResult], None] | None = None, on_bytes: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """The report (docs/report-format.md) of a policy applied to every tick of the trace at ``trace_path`` — a
    file, or a directory of segments replayed in order through one offline agent. ``on_step`` sees every tick's
    result (progress, plots); ``on_bytes`` is told (bytes read so far, bytes in all) after every tick (an ETA).

    ``policy`` None applies the trace's own: the policy its header records (``policy_source`` "trace"), or the
    defaults when it records none ("defaults"). A directory whose segments record different policies (a reload
    began a new segment) switches at each such segment's first tick, as the agent switched on the reload: learned
    baselines, cooldowns and spent tokens kept; the report lists the switches under ``policy_changes``. A ``policy``
    given applies to every tick; ``policy_source`` names it in the report.

    Raises ``TraceError`` ("FILE:LINE: field: reason") at the first invalid line, ``ConfigError`` for a recorded
    policy that does not validate, ``OSError`` if unreadable.
    """
    gate = PlausibilityGate()  # one quarantine across a directory's segments, as one agent kept it
    traces = [read_trace(path, gate=gate) for path in trace_files(trace_path)]
    run = PolicyReplay(traces, path=str(trace_path), policy=policy, policy_source=policy_source,
                       own_namespace=own_namespace, tenant_label=tenant_label)
    total, done = sum(trace.path.stat().st_size for trace in traces), 0
    for index, trace in enumerate(traces):
        run.enter(index)
        for record in trace:
            step = run.step(record)
            if on_step is not None:
                on_step(step)
            if on_bytes is not None:
                on_bytes(done + trace.bytes_read(), total)
        done += trace.path.stat().st_size
    return run.finish()


class PolicyReplay:
    """One policy applied to a recording's ticks as they are fed, one at a time: what :func:`replay` does, in steps,
    so that two policies can advance in lockstep over one reading of the trace (the what-if, evaluation/whatif.py)
    and a report can be finished after any tick.

    ``traces``: the recording's segments in order, headers read; ``policy`` None applies each segment's recorded
    policy (see :func:`replay`). Call :meth:`enter` with a segment's index before feeding its records.
    """

    def __init__(self, traces: Sequence[Trace], *, path: str, policy: Policy | None, policy_source: str,
                 own_namespace: str | None, tenant_label: str | None) -> None:
        header = traces[0].header
        source = {
            "path": path,
            "node": header.node,
            "tick_seconds": header.tick_seconds,
            "started": header.started,
            "agent_version": header.agent_version,
            "source": header.source,
        }
        # Checked before the first tick: a segment's bad policy fails the replay now, not an hour into it.
        self._recorded = [recorded_policy(trace) for trace in traces] if policy is None else [None] * len(traces)
        self._paths = [str(trace.path) for trace in traces]
        if policy is None:
            first = self._recorded[0]
            policy, policy_source = (first, FROM_TRACE) if first is not None else (Policy(), DEFAULTS)
        self._agent = OfflineAgent(policy, own_namespace=own_namespace, tenant_label=tenant_label,
                                   tick_seconds=header.tick_seconds)
        self._builder = ReportBuilder(source=source, mode=policy.action.mode.value, policy_source=policy_source)
        self._switch: int | None = None  # the segment whose recorded policy applies from its next tick fed

    def enter(self, index: int) -> None:
        """The records fed next come from segment ``index``: its recorded policy, if another, applies from the
        first of them (as the agent switched on the reload that began the segment)."""
        own = self._recorded[index]
        self._switch = index if own is not None and own != self._agent.policy else None

    def step(self, record: TraceRecord) -> StepResult:
        if self._switch is not None:
            self._agent.set_policy(self._recorded[self._switch], tick=record.tick)
            self._builder.policy_changed(tick=record.tick, path=self._paths[self._switch])
            self._switch = None
        step = self._agent.step(record.sample, record.attribution, record.external_signals,
                                borrowed_activity=record.borrowed_activity)
        self._builder.add(step)
        return step

    def finish(self) -> dict[str, Any]:
        """The report of the ticks fed so far."""
        return self._builder.finish()
