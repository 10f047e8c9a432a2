"""`gpu-watchdog replay` from parsed arguments to what it prints: which traces, which policies, which report.

The command has grown past argument parsing (several traces, worker processes, a second policy, a plot, progress
on a terminal), so it lives here, beside the replay it drives, and the CLI only hands it its arguments. Errors a
user can fix (a bad trace line, a bad policy field, an unreadable file) are one line on stderr and exit code 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

from watchdog.config import ConfigError
from watchdog.evaluation.progress import Progress
from watchdog.evaluation.replay_jobs import ReplayJob, ReplayResult, run_jobs
from watchdog.evaluation.replay_policy import label, load_policy_file, stderr_line
from watchdog.evaluation.report_text import compare, format_compare, format_text
from watchdog.trace import TraceError


def replay_command(args: Any, *, stdout: TextIO, stderr: TextIO) -> int:
    """``args``: trace (list), policy, compare, report (None: text on a terminal), workers, namespace,
    tenant_label, plot — as `gpu-watchdog replay` parses them."""
    text = (args.report or ("text" if stdout.isatty() else "json")) == "text"
    # A plot needs every tick of the first trace in this process; so does per-tick progress.
    parallel = args.workers > 1 and len(args.trace) > 1 and not args.plot
    progress = Progress("replay", unit="traces" if parallel else "ticks", stream=stderr,
                        total=len(args.trace) if parallel else None)
    try:
        # No --policy: each trace's own (replay_policy). A file may be a policy or a scenario (its policy: section).
        policy, source = load_policy_file(args.policy) if args.policy else (None, "given")
        other, other_source = load_policy_file(args.compare) if args.compare else (None, "given")
        jobs = [ReplayJob(Path(path), policy, other, own_namespace=args.namespace, tenant_label=args.tenant_label,
                          policy_source=source, compare_source=other_source) for path in args.trace]
        timeline = None
        if args.plot:
            from watchdog.evaluation.plot import TimelineRecorder

            timeline = TimelineRecorder()

        def on_step(step) -> None:
            progress.update()
            if timeline is not None:
                timeline(step)

        def on_bytes(done: int, total: int) -> None:  # one trace, one policy: how far into its bytes
            if len(jobs) == 1 and other is None and total:
                progress.fraction = done / total

        results = run_jobs(jobs, workers=args.workers if parallel else 1, on_step=None if parallel else on_step,
                           on_done=(lambda _: progress.update()) if parallel else None, on_bytes=on_bytes)
        progress.close()
        if timeline is not None:
            timeline.render(args.plot, report=results[0].report)
    except (ConfigError, TraceError) as exc:
        progress.close()
        print(f"gpu-watchdog replay: {exc}", file=stderr)
        return 2
    except OSError as exc:
        progress.close()
        print(f"gpu-watchdog replay: cannot read {exc.filename}: {exc.strerror}", file=stderr)
        return 2
    for result in results:  # which policy each report applied: the trace's, a file's, or the defaults
        print(f"gpu-watchdog replay: {stderr_line(result.report)}", file=stderr)
    print(_render(results, text=text), file=stdout)
    return 0


def _render(results: list[ReplayResult], *, text: bool) -> str:
    if any(result.compared is not None for result in results):
        diffs = [compare(result.report, result.compared) for result in results]
        if text:
            return "\n\n".join(f"{result.report['trace']['path']}\n" + format_compare(
                diff, name_a=label(result.report["policy_source"]), name_b=label(result.compared["policy_source"]))
                for result, diff in zip(results, diffs))
        out: list[Any] = [{"a": r.report, "b": r.compared, "diff": d} for r, d in zip(results, diffs)]
    else:
        if text:
            return "\n\n".join(format_text(result.report) for result in results)
        out = [result.report for result in results]
    return json.dumps(out[0] if len(out) == 1 else out, indent=2, sort_keys=False)
