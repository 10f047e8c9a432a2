"""Replaying several traces (nodes) at once, and one trace under two policies, for `gpu-watchdog replay`.

A cluster incident spans nodes, and a replay is single-threaded Python: with ``workers`` > 1 each trace goes to
its own process (``concurrent.futures.ProcessPoolExecutor``), so N nodes replay in about the time of the slowest
on N cores. A job is plain data (paths, policies) so it pickles; its result is the report(s), in job order.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from watchdog.config import Policy
from watchdog.evaluation.replay import replay
from watchdog.evaluation.stages import StepResult


@dataclass(frozen=True, slots=True)
class ReplayJob:
    path: Path
    policy: Policy | None  # None: the policy the trace records (replay.replay)
    compare: Policy | None = None  # a second policy: the same trace replayed again under it
    own_namespace: str | None = "gpu-watchdog"
    tenant_label: str | None = None
    policy_source: str = "given"  # how the reports name policy and compare (replay_policy)
    compare_source: str = "given"


@dataclass(frozen=True, slots=True)
class ReplayResult:
    report: dict[str, Any]
    compared: dict[str, Any] | None = None  # the report under ReplayJob.compare


def run_job(job: ReplayJob, on_step: Callable[[StepResult], None] | None = None,
            on_bytes: Callable[[int, int], None] | None = None) -> ReplayResult:
    def under(policy: Policy | None, source: str) -> dict[str, Any]:
        return replay(job.path, policy=policy, policy_source=source, own_namespace=job.own_namespace,
                      tenant_label=job.tenant_label, on_step=on_step, on_bytes=on_bytes)

    report = under(job.policy, job.policy_source)  # A first: a plot draws the first replay of the trace
    return ReplayResult(report, under(job.compare, job.compare_source) if job.compare is not None else None)


def run_jobs(jobs: list[ReplayJob], *, workers: int = 1, on_step: Callable[[StepResult], None] | None = None,
             on_done: Callable[[ReplayResult], None] | None = None,
             on_bytes: Callable[[int, int], None] | None = None) -> list[ReplayResult]:
    """Every job's result, in job order. ``on_step`` and ``on_bytes`` (of the job under way) see each tick only
    when jobs run in this process."""
    if workers <= 1 or len(jobs) <= 1:
        results = []
        for job in jobs:
            results.append(run_job(job, on_step, on_bytes))
            if on_done is not None:
                on_done(results[-1])
        return results
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        futures = [pool.submit(run_job, job) for job in jobs]
        results = []
        for future in futures:
            results.append(future.result())  # the first failure (a TraceError naming its file) is raised here
            if on_done is not None:
                on_done(results[-1])
        return results
