"""The actions dashboard: what gpu-watchdog concluded, what it did about it, and whether it is healthy.

An operator deciding whether to trust (or switch on) evictions needs three answers on one page: which findings
are open, what every eviction decision ended in (`evictions_total{result}` counts each decision exactly once, so
`dry_run` and `blocked_pdb` show what enforce mode would have done), and whether the agent could see clearly
(stage success, errors, attribution health), since the agent never acts on an unhealthy attribution.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard

from dashboard_panels import (
    NAMESPACE,
    NODE,
    PanelIds,
    Query,
    dashboard,
    events_in,
    label_table,
    single_stat,
    time_series,
)

UID = "gpu-watchdog-actions"
EVICTIONS = f"gpu_watchdog_evictions_total{{{NODE}, {NAMESPACE}}}"
ERRORS = f"gpu_watchdog_errors_total{{{NODE}}}"
RELOADS = f"gpu_watchdog_policy_reloads_total{{{NODE}}}"


def _status(ids: PanelIds) -> list:
    return [
        single_stat(ids, title="Agents ready", description="Agents whose first full sample is in.",
                    query=Query(f"sum(gpu_watchdog_ready{{{NODE}}})")),
        single_stat(ids, title="Agents in enforce mode", description="Agents that send real evictions; the "
                    "others observe or dry-run.",
                    query=Query(f'sum(gpu_watchdog_mode{{{NODE}, mode="enforce"}}) or vector(0)')),
        single_stat(ids, title="Evictions paused", description="Agents whose kill switch (ConfigMap) pauses "
                    "every eviction.", query=Query(f"sum(gpu_watchdog_evictions_paused{{{NODE}}})"), red_at=1),
        single_stat(ids, title="Attribution unhealthy", description="Agents that could not read the kubelet or "
                    "the API this cycle; they do not act on absences.",
                    query=Query(f"count(gpu_watchdog_attribution_healthy{{{NODE}}} == 0) or vector(0)"),
                    red_at=1),
        single_stat(ids, title="Open critical findings", description="Actionable findings open now.",
                    query=Query(f'sum(gpu_watchdog_findings{{{NODE}, severity="critical"}}) or vector(0)'),
                    red_at=1),
        single_stat(ids, title="Oldest sample age", unit="s", description="Seconds since the stalest agent took "
                    "its latest NVML sample.",
                    query=Query(f"max(time() - gpu_watchdog_last_sample_timestamp_seconds{{{NODE}}})"),
                    red_at=120),
        label_table(ids, title="Mode per node", span=8, description="Current action mode (observe, dry-run, "
                    "enforce).", query=Query(f"gpu_watchdog_mode{{{NODE}}} == 1")),
        time_series(ids, title="Kill switch", span=16, description="1 while evictions are paused.",
                    queries=(Query(f"gpu_watchdog_evictions_paused{{{NODE}}}", "{{node}}"),)),
    ]


def _findings(ids: PanelIds) -> list:
    findings = (
        f"gpu_watchdog_findings{{{NODE}, victim_namespace=~\"$namespace\"}} or "
        f"gpu_watchdog_findings{{{NODE}, culprit_namespace=~\"$namespace\"}}"
    )
    return [
        time_series(ids, title="Findings by kind", description="Open findings (one per victim) by kind and "
                    "severity; warnings are report-only.",
                    queries=(Query(f"sum by (kind, severity) (gpu_watchdog_findings{{{NODE}}})",
                                   "{{kind}} ({{severity}})"),)),
        time_series(ids, title="Findings by node", description="Open findings per node.",
                    queries=(Query(f"sum by (node, kind) (gpu_watchdog_findings{{{NODE}}})", "{{node}} {{kind}}"),)),
        label_table(ids, title="Open findings: victims and culprits", span=24, description="Every open finding "
                    "touching the selected namespaces, as victim or as culprit.", query=Query(f"{findings}")),
    ]


def _evictions(ids: PanelIds) -> list:
    return [
        time_series(ids, title="Eviction decisions by result", bars=True, span=8, description="Every decision "
                    "ends in one result: evicted, dry_run, blocked_pdb, rate_limited, protected, paused…",
                    queries=(Query(f"sum by (result) ({events_in(EVICTIONS, '$__rate_interval')}) > 0",
                                   "{{result}}"),)),
        time_series(ids, title="Eviction decisions by reason", bars=True, span=8, description="The finding kind "
                    "(or `alert` for the controller) behind each decision.",
                    queries=(Query(f"sum by (reason) ({events_in(EVICTIONS, '$__rate_interval')}) > 0",
                                   "{{reason}}"),)),
        time_series(ids, title="Eviction decisions by namespace", bars=True, span=8, description="Namespace of "
                    "the pod each decision was about.",
                    queries=(Query(f"sum by (namespace) ({events_in(EVICTIONS, '$__rate_interval')}) > 0",
                                   "{{namespace}}"),)),
        label_table(ids, title="Eviction decisions in the time range", span=24, description="Decisions "
                    "within the dashboard range by result, reason and namespace (a series' first decision counts).",
                    query=Query(f"sum by (result, reason, namespace) ({events_in(EVICTIONS, '$__range')}) > 0")),
    ]


def _health(ids: PanelIds) -> list:
    return [
        time_series(ids, title="Stage success", span=8, description="1 when the stage succeeded in the latest "
                    "cycle; a failing stage degrades the cycle, never stops the agent.",
                    queries=(Query(f"gpu_watchdog_stage_success{{{NODE}}}", "{{node}} {{stage}}"),)),
        time_series(ids, title="Stage duration", unit="s", span=8, description="Duration of each stage in the "
                    "latest cycle.", queries=(Query(f"gpu_watchdog_stage_duration_seconds{{{NODE}}}",
                                                    "{{node}} {{stage}}"),)),
        time_series(ids, title="Errors", bars=True, span=8, description="Errors per interval by stage and kind "
                    "(a series' first error counts).",
                    queries=(Query(f"sum by (stage, error) ({events_in(ERRORS, '$__rate_interval')}) > 0",
                                   "{{stage}}: {{error}}"),)),
        time_series(ids, title="Attribution sources", span=8, description="1 when the kubelet (PodResources) or "
                    "the API (pod watch) answered this cycle.",
                    queries=(Query(f"gpu_watchdog_attribution_source_up{{{NODE}}}", "{{node}} {{source}}"),)),
        time_series(ids, title="Policy reloads", bars=True, span=8, description="Policy file reloads by result; "
                    "a failure keeps the previous policy.",
                    queries=(Query(f"sum by (result) ({events_in(RELOADS, '$__rate_interval')}) > 0",
                                   "{{result}}"),)),
        time_series(ids, title="Sample age", unit="s", span=8, description="Seconds since each agent's latest "
                    "NVML sample.", queries=(Query(f"time() - gpu_watchdog_last_sample_timestamp_seconds{{{NODE}}}",
                                                   "{{node}}"),)),
    ]


def _isolation(ids: PanelIds) -> list:
    """The controller's periodic isolation audit (gpu-watchdog audit): cluster-wide, so no node filter."""
    check = "gpu_watchdog_isolation_check"
    return [
        single_stat(ids, title="Tenants failing a check", description="Tenants with at least one failed isolation "
                    "check in the controller's latest audit.",
                    query=Query(f'count(count by (tenant) ({check}{{result="fail"}} == 1)) or vector(0)'), red_at=1),
        single_stat(ids, title="GPU tenants without quota or default deny", description="Tenants with GPU pods "
                    "and no GPU ResourceQuota or no default-deny NetworkPolicy (the TenantIsolationMissing alert).",
                    query=Query(f'count(count by (tenant) ({check}{{check=~"gpu-quota|default-deny", result="fail"}}'
                                " == 1 and on (tenant) gpu_watchdog_isolation_tenant_gpu_pods > 0)) or vector(0)"),
                    red_at=1),
        label_table(ids, title="Isolation scorecard", span=16, description="Every check per tenant that is not "
                    "a pass; run `gpu-watchdog audit` for the evidence and the fixes.",
                    query=Query(f'{check}{{result!="pass"}} == 1')),
    ]


def build_actions_dashboard() -> Dashboard:
    """The actions dashboard builder: status, findings, evictions, pipeline health."""
    return dashboard(
        title="gpu-watchdog / Findings and actions",
        uid=UID,
        description="gpu-watchdog's findings, eviction decisions and pipeline health.",
        tags=["gpu-watchdog", "gpu", "evictions"],
        sections=(
            ("Status", _status),
            ("Findings", _findings),
            ("Evictions", _evictions),
            ("Pipeline health", _health),
            ("Tenant isolation", _isolation),
        ),
    )
