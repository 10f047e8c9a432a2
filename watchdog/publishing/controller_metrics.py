"""The controller's /metrics: what `gpu-watchdog controller` did with Alertmanager's webhooks, as Prometheus text.

The controller is a Deployment, not the node agent, so it has no Snapshot and no `node`; its families are its own
(listed in docs/metrics.md, "Controller"). They are built from a plain status record at scrape time (the
client_python custom-collector shape, as for the agent) and written by the same renderer as the agent's /metrics,
so the text format, escaping and OpenMetrics output cannot differ between the two. It lives here because only
this package may speak the exposition format (the import-linter contracts in pyproject.toml).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from typing import Mapping

import watchdog
from watchdog.publishing.catalogue import PREFIX, FamilySpec
from watchdog.publishing.exposition import content_type, wants_openmetrics
from watchdog.publishing.render import new_render_cache, render_families
from watchdog.publishing.series import Family

CONTROLLER_EVICTIONS = FamilySpec(
    PREFIX + "evictions_total", "counter", "Alert-driven eviction decisions and attempts by result.",
    ("result", "reason", "namespace"),
)
CONTROLLER_PAUSED = FamilySpec(
    PREFIX + "evictions_paused", "gauge", "1 while the kill switch pauses evictions.", ()
)
CONTROLLER_LEADER = FamilySpec(
    PREFIX + "controller_leader", "gauge", "1 while this replica holds the leader Lease and may evict.", ()
)
CONTROLLER_WEBHOOK_REQUESTS = FamilySpec(
    PREFIX + "controller_webhook_requests_total", "counter", "Alertmanager webhook requests by HTTP status code.",
    ("code",),
)
CONTROLLER_BUILD_INFO = FamilySpec(PREFIX + "build_info", "gauge", "Controller build; always 1.", ("version", "python"))
ISOLATION_CHECK = FamilySpec(
    PREFIX + "isolation_check", "gauge",
    "1 for each tenant's latest isolation audit result per check (gpu-watchdog audit).", ("tenant", "check", "result"),
)
ISOLATION_GPU_PODS = FamilySpec(
    PREFIX + "isolation_tenant_gpu_pods", "gauge", "GPU pods of each tenant at the latest isolation audit.",
    ("tenant",),
)
ISOLATION_AUDITS = FamilySpec(
    PREFIX + "isolation_audits_total", "counter",
    "Isolation audits by outcome: success, partial (some kinds unreadable), failure (cluster unreadable).",
    ("result",),
)
# The controller-only families dashboards and alert rules may query besides the agent's (ALL_FAMILIES).
ISOLATION_FAMILIES = (ISOLATION_CHECK, ISOLATION_GPU_PODS, ISOLATION_AUDITS)
CONTROLLER_FAMILIES = (
    CONTROLLER_EVICTIONS, CONTROLLER_PAUSED, CONTROLLER_LEADER, CONTROLLER_WEBHOOK_REQUESTS, CONTROLLER_BUILD_INFO,
    ISOLATION_CHECK, ISOLATION_GPU_PODS, ISOLATION_AUDITS,
)


@dataclass(frozen=True, slots=True)
class ControllerStatus:
    """What one controller replica reports: its evictor's counts, kill switch, leadership and webhook answers."""

    evictions: Mapping[tuple[str, str, str], int] = field(default_factory=dict)  # (result, reason, namespace) → n
    paused: bool = False
    leader: bool = False
    webhook_requests: Mapping[int, int] = field(default_factory=dict)  # HTTP status → n
    isolation: Mapping[tuple[str, str], str] = field(default_factory=dict)  # (tenant, check) → result
    isolation_gpu_pods: Mapping[str, int] = field(default_factory=dict)  # tenant → GPU pods
    isolation_audits: Mapping[str, int] = field(default_factory=dict)  # outcome → n


def controller_families(status: ControllerStatus) -> list[Family]:
    """The controller's families, in a fixed order; gauges and build_info always present, counters when non-empty."""
    families = {spec: Family(spec, spec.labels) for spec in CONTROLLER_FAMILIES}
    for (result, reason, namespace), count in sorted(status.evictions.items()):
        families[CONTROLLER_EVICTIONS].add((result, reason, namespace), count)
    families[CONTROLLER_PAUSED].add((), 1 if status.paused else 0)
    families[CONTROLLER_LEADER].add((), 1 if status.leader else 0)
    for code, count in sorted(status.webhook_requests.items()):
        families[CONTROLLER_WEBHOOK_REQUESTS].add((str(code),), count)
    families[CONTROLLER_BUILD_INFO].add((watchdog.__version__, platform.python_version()), 1)
    for (tenant, check), result in status.isolation.items():  # the report's order: tenants, then checks
        families[ISOLATION_CHECK].add((tenant, check, result), 1)
    for tenant, count in status.isolation_gpu_pods.items():
        families[ISOLATION_GPU_PODS].add((tenant,), count)
    for outcome, count in sorted(status.isolation_audits.items()):
        families[ISOLATION_AUDITS].add((outcome,), count)
    return [family for family in families.values() if family.samples]


class ControllerExposition:
    """Renders the controller's status for a scrape, in the format the scraper asked for."""

    def __init__(self) -> None:
        self._cache = new_render_cache()

    def render(self, status: ControllerStatus, *, accept: str | None) -> tuple[bytes, str]:
        """(body, Content-Type) for one scrape with this Accept header."""
        openmetrics = wants_openmetrics(accept)
        body = render_families(controller_families(status), openmetrics=openmetrics, cache=self._cache)
        return body, content_type(openmetrics=openmetrics)
