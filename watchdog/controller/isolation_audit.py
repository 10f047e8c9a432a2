"""Read the cluster and audit tenant isolation: once for ``gpu-watchdog audit``, every few minutes in the controller.

The read (watchdog.kube.cluster_read) and the checks (watchdog.isolation) meet here, the lowest layer allowed to
import both. The controller's ``isolation_auditor`` keeps the latest report for /metrics
(``gpu_watchdog_isolation_check{tenant,check,result}``); a failed read keeps the previous scorecard and is counted,
so a flaky API server neither blanks the dashboard nor fires the alerts that watch it. Only the leader audits:
every replica would read the same objects, and one reader is enough load on the API server.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Callable

from watchdog.controller.agent_observations import read_agent_observations
from watchdog.isolation import AuditReport, AuditSettings, run_audit
from watchdog.kube.client import KubeApi
from watchdog.kube.cluster_read import read_cluster

log = logging.getLogger(__name__)


async def audit_cluster(api: KubeApi, *, settings: AuditSettings = AuditSettings(), namespace_selector: str = "",
                        prometheus_url: str = "") -> AuditReport:
    """One read and one audit; failures to read become lines of the report, never exceptions. With
    ``prometheus_url``, the agents' attribution names who shares each GPU (agent_observations.py)."""
    cluster = await read_cluster(api, namespace_selector=namespace_selector)
    problem = None
    if prometheus_url:
        cluster.gpu_users, cluster.agent_drivers, problem = await read_agent_observations(prometheus_url)
    report = await asyncio.to_thread(run_audit, cluster, settings)  # a large cluster's checks: off the event loop
    if problem:
        report.errors.append(problem)
    return report


class IsolationAuditor:
    """``await auditor.run()`` audits every ``interval`` seconds while ``is_leader()``; ``latest`` is for /metrics."""

    def __init__(self, api: KubeApi, *, interval: float, settings: AuditSettings, namespace_selector: str = "",
                 prometheus_url: str = "", is_leader: Callable[[], bool] = lambda: True, poll: float = 2.0,
                 clock: Callable[[], float] = time.monotonic):
        self._api = api
        self._interval = interval
        self._poll = min(poll, interval)  # how soon a new leader runs its first audit
        self._clock = clock
        self._settings = settings
        self._selector = namespace_selector
        self._prometheus_url = prometheus_url
        self._is_leader = is_leader
        self.latest: AuditReport | None = None
        self.runs: Counter[str] = Counter()  # "success" | "failure" → n

    async def audit_once(self) -> AuditReport:
        report = await audit_cluster(self._api, settings=self._settings, namespace_selector=self._selector,
                                     prometheus_url=self._prometheus_url)
        if report.errors and not report.results:
            self.runs["failure"] += 1
            log.warning("isolation audit could not read the cluster: %s", "; ".join(report.errors))
        else:
            self.runs["success" if not report.errors else "partial"] += 1
            self.latest = report
        return report

    async def run(self) -> None:
        last: float | None = None
        while True:
            if self._is_leader() and (last is None or self._clock() - last >= self._interval):
                last = self._clock()
                await self.audit_once()
            await asyncio.sleep(self._poll)
