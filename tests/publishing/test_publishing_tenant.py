"""The ``tenant`` label on /metrics comes from the tick's pod index, the one carrier of the tenant rule that
detection and action read too: present exactly when that index counts tenants by a pod label, with its values."""

from __future__ import annotations

import dataclasses

from watchdog.model import Attribution, Snapshot


def relabelled(snapshot: Snapshot, *, index_label: str | None) -> Snapshot:
    return dataclasses.replace(snapshot, attribution=snapshot.attribution.with_tenant_label(index_label))


def tenants(rows) -> set[str]:
    return {labels["tenant"] for labels, _ in rows}


def test_the_tenant_label_and_its_values_follow_the_pod_index(rich_snapshot, series):
    rows = series(relabelled(rich_snapshot, index_label="team"))
    assert tenants(rows["gpu_watchdog_pod_info"]) == {"research", "product", "batch"}
    assert tenants(rows["gpu_watchdog_pod_gpu_memory_used_bytes"]) <= {"research", "product", "batch", ""}
    by_app = series(relabelled(rich_snapshot, index_label="app"))
    assert tenants(by_app["gpu_watchdog_pod_info"]) == {"train-a", "inf-b", "inf-c", "ts-1", "ts-2"}


def test_no_tenant_label_when_the_pod_index_counts_by_namespace(rich_snapshot, series):
    rows = series(relabelled(rich_snapshot, index_label=None))
    for name, family_rows in rows.items():
        assert all("tenant" not in labels for labels, _ in family_rows), name
    # A tick without attribution (before the first, or one that failed) has no owners, hence no tenants to name.
    bare = dataclasses.replace(rich_snapshot, attribution=None)
    assert all("tenant" not in labels for rows in series(bare).values() for labels, _ in rows)
    failed = dataclasses.replace(rich_snapshot, attribution=Attribution(healthy=False, kubelet_ok=False))
    assert all("tenant" not in labels for rows in series(failed).values() for labels, _ in rows)
