"""The what-if replay an agent runs in its worker process: its own flight-recorder segments within a time window,
under the policy the trace records (A) and a posted policy (B), in lockstep.

It is `gpu-watchdog replay DIRECTORY --compare POLICY --report json` on the node, with the same engine
(``PolicyReplay``, the stepping form of ``replay``) and the same diff, so its result is one element of that
command's output. The two policies advance together, tick by tick over one reading of the segments: when the CPU
bound stops the replay, both reports cover the same ticks (the first in the window up to the last replayed), and
their diff is a true comparison of that prefix — an episode still open there ends at that tick in both.

Segments: every file ``watchdog.trace.flight.segments`` lists, the one being written included: the recorder
sync-flushes every line, so its flushed part reads like a segment cut short (the reader keeps every whole line).
A segment is skipped when the next one begins before ``since`` or it begins after ``until``; ticks are then kept
by timestamp, ``since`` ≤ t ≤ ``until``. A segment deleted by rotation while the replay runs is skipped. When the
agent restarted within the window (its ticks count from 0 again: a hostPath keeps the older run's segments), only
the newest run is replayed, and the outcome's ``since`` says where it begins.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from watchdog.evaluation.replay import PolicyReplay
from watchdog.evaluation.report_text import compare
from watchdog.model.plausibility import PlausibilityGate
from watchdog.service.whatif_jobs import CANCELLED, DONE, NO_DATA, WhatIfOutcome, WhatIfProgress, WhatIfRequest
from watchdog.trace import Trace, read_trace
from watchdog.trace.flight import segment_start, segments

POSTED = "given"  # policy_source of report B: a policy handed to the replay (report.schema.json)
_PROGRESS_SECONDS = 0.25  # how often progress goes to the agent, at most
_cpu_seconds = time.process_time  # this process's CPU time, user + system: what max_cpu_seconds bounds


def window_segments(directory: str | Path, *, since: float | None, until: float | None) -> list[Path]:
    """The segments that may hold ticks in [since, until], oldest first (see the module docstring)."""
    found = segments(directory)
    starts = [segment_start(path) for path in found]
    chosen = []
    for index, path in enumerate(found):
        following = starts[index + 1] if index + 1 < len(found) else None
        if since is not None and following is not None and following < since:
            continue
        if until is not None and starts[index] is not None and starts[index] > until:
            continue
        chosen.append(path)
    return chosen


def _window_text(since: float | None, until: float | None) -> str:
    return f"between {since if since is not None else 'the first tick'} and {until if until is not None else 'now'}"


def _first_tick(path: Path) -> tuple[int, float] | None:
    """(tick, timestamp) of the segment's first tick; None for one without a tick yet (or deleted meanwhile)."""
    try:
        for record in read_trace(path):  # a gate of its own: the replay's quarantine must not see this read
            return record.tick, record.sample.timestamp
    except FileNotFoundError:
        pass
    return None


def newest_run(paths: list[Path]) -> tuple[list[Path], float | None]:
    """The segments of the agent's newest run among ``paths``, and the time its first tick was taken when an
    older run was left out (None: nothing left out). A restarted agent counts its ticks from 0 again, and one
    offline agent cannot step back in ticks, so the what-if replays the agent as it runs now."""
    starts = [_first_tick(path) for path in paths]
    begin, previous = 0, None
    for index, start in enumerate(starts):
        if start is None:
            continue
        if previous is not None and start[0] <= previous:
            begin = index
        previous = start[0]
    if begin == 0:
        return paths, None
    return paths[begin:], starts[begin][1]


def run_whatif(request: WhatIfRequest, progress: Callable[[WhatIfProgress], None]) -> WhatIfOutcome:
    """Replay the window under A and B in lockstep; stop at ``max_cpu_seconds`` of this process's CPU time."""
    cpu = _cpu_seconds
    gate = PlausibilityGate()  # one quarantine across the segments, as one agent kept it
    traces: list[Trace] = []
    chosen, restarted = newest_run(window_segments(request.directory, since=request.since, until=request.until))
    for path in chosen:
        try:
            traces.append(read_trace(path, gate=gate))
        except FileNotFoundError:
            continue  # deleted by rotation since it was listed
    since = restarted if restarted is not None and (request.since is None or request.since < restarted) else None
    if not traces:
        text = _window_text(request.since, request.until)
        return WhatIfOutcome(NO_DATA, None, f"the flight recorder holds no segment {text}", 0, 0, cpu())
    options = {"path": request.directory, "own_namespace": request.own_namespace,
               "tenant_label": request.tenant_label}
    a = PolicyReplay(traces, policy=None, policy_source="trace", **options)
    b = PolicyReplay(traces, policy=request.policy, policy_source=POSTED, **options)
    total = sum(_size(trace) for trace in traces) or 1
    done_bytes, ticks, state, last_report = 0, 0, DONE, time.monotonic()
    for index, trace in enumerate(traces):
        a.enter(index)
        b.enter(index)
        try:
            for record in trace:
                timestamp = record.sample.timestamp
                if (request.since is not None and timestamp < request.since) or \
                        (request.until is not None and timestamp > request.until):
                    if cpu() >= request.max_cpu_seconds:  # reading ticks outside the window costs CPU too
                        state = CANCELLED
                        break
                    continue
                a.step(record)
                b.step(record)
                ticks += 1
                if cpu() >= request.max_cpu_seconds:
                    state = CANCELLED
                    break
                if time.monotonic() - last_report >= _PROGRESS_SECONDS:
                    last_report = time.monotonic()
                    progress(WhatIfProgress(ticks, min(1.0, (done_bytes + trace.bytes_read()) / total), cpu(),
                                            len(traces)))
        except FileNotFoundError:
            pass  # deleted by rotation before it was opened: its ticks are gone
        done_bytes += _size(trace)
        if state == CANCELLED:
            break
    if ticks == 0 and state == CANCELLED:
        return WhatIfOutcome(CANCELLED, None, f"stopped at the CPU bound of {request.max_cpu_seconds:g} s before "
                             "the window's first tick: nothing replayed", 0, len(traces), cpu(), since)
    if ticks == 0:
        text = _window_text(request.since, request.until)
        return WhatIfOutcome(NO_DATA, None, f"the flight recorder holds no tick {text}", 0, len(traces), cpu(), since)
    report_a, report_b = a.finish(), b.finish()
    result = {"a": report_a, "b": report_b, "diff": compare(report_a, report_b)}
    error = None if state == DONE else (
        f"stopped at the CPU bound of {request.max_cpu_seconds:g} s after {ticks} ticks: the result is partial "
        f"(both policies replayed up to tick {report_a['last_tick']})")
    return WhatIfOutcome(state, result, error, ticks, len(traces), cpu(), since)


def _size(trace: Trace) -> int:
    try:
        return trace.path.stat().st_size
    except OSError:
        return 0
