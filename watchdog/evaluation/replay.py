"""`gpu-watchdog replay`: re-run detection and the eviction rules on a recorded trace, offline and deterministically.

This is how a finding (or a missed one) is explained after the fact, and how a policy change is tried before it is
rolled out: the same trace with two policies gives two reports to compare. Nothing here talks to Kubernetes; the
only inputs are the trace and the policy, so the same pair always gives the same report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from watchdog.config import Policy
from watchdog.evaluation.report import ReportBuilder
from watchdog.evaluation.stages import OfflineAgent
from watchdog.trace import read_trace


def replay(
    trace_path: str | Path, *, policy: Policy, own_namespace: str | None = "gpu-watchdog",
    tenant_label: str | None = None,
) -> dict[str, Any]:
    """The report (docs/report-format.md) of ``policy`` applied to every tick of the trace at ``trace_path``.

    Raises ``TraceError`` ("FILE:LINE: field: reason") at the first invalid line, ``OSError`` if unreadable.
    """
    trace = read_trace(trace_path)
    header = trace.header
    source = {
        "path": str(trace_path),
        "node": header.node,
        "tick_seconds": header.tick_seconds,
        "started": header.started,
        "agent_version": header.agent_version,
        "source": header.source,
    }
    agent = OfflineAgent(policy, own_namespace=own_namespace, tenant_label=tenant_label)
    builder = ReportBuilder(source=source, mode=policy.action.mode.value)
    for record in trace:
        builder.add(agent.step(record.sample, record.attribution, record.external_signals))
    return builder.finish()
