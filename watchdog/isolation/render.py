"""The audit report as a table for people, and as JSON or YAML for tools (the same fields, the fixes included).

The table prints one line per tenant and check with the evidence, then the fix objects as one multi-document YAML
stream that ``kubectl apply -f -`` accepts, then the errors that kept something from being checked; with no tenant
it says so instead of printing an empty table.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from watchdog.isolation.results import AuditReport


def report_dict(report: AuditReport) -> dict[str, Any]:
    tenants = []
    for tenant, namespaces in report.namespaces.items():
        tenants.append({
            "tenant": tenant, "namespaces": list(namespaces), "gpuPods": report.gpu_pods.get(tenant, 0),
            "checks": [{"check": r.check, "result": r.result, "evidence": r.evidence,
                        **({"fix": r.fix} if r.fix else {})} for r in report.results if r.tenant == tenant],
        })
    return {"kind": "IsolationAudit", "tenants": tenants, "errors": list(report.errors)}


def render_json(report: AuditReport) -> str:
    return json.dumps(report_dict(report), indent=2) + "\n"


def render_yaml(report: AuditReport) -> str:
    return yaml.safe_dump(report_dict(report), sort_keys=False, width=120)


def fixes_yaml(report: AuditReport) -> str:
    """Every fix object as one YAML stream for ``kubectl apply -f -`` ("" when nothing needs fixing)."""
    fixes = [r.fix for r in report.results if r.fix]
    return yaml.safe_dump_all(fixes, sort_keys=False) if fixes else ""


def render_table(report: AuditReport) -> str:
    if not report.namespaces:  # no header over nothing: an empty table reads like a clean audit
        lines = ["No tenants audited."] + (["", "Errors:"] + [f"  {error}" for error in report.errors]
                                           if report.errors else [])
        return "\n".join(lines) + "\n"
    rows = [("TENANT", "CHECK", "RESULT", "EVIDENCE")]
    rows += [(r.tenant, r.check, r.result.upper(), r.evidence) for r in report.results]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths)) + "  " + row[3] for row in rows]
    fixes = fixes_yaml(report)
    if fixes:
        lines += ["", "# Suggested fixes (kubectl apply -f -):", fixes.rstrip("\n")]
    if report.errors:
        lines += ["", "Errors:"] + [f"  {error}" for error in report.errors]
    return "\n".join(lines) + "\n"


RENDERERS = {"table": render_table, "json": render_json, "yaml": render_yaml}
