"""docs/metrics.md documents exactly the families the collector emits, with their types, units and labels."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.publishing import ALL_FAMILIES, build_families

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def documented() -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """name → (type, unit, labels) from the table rows; `tenant?` kept with its marker."""
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if not line.startswith("| `gpu_watchdog_"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 6, f"row needs 6 cells: {line}"
        name, kind, unit, labels = cells[0].strip("`"), cells[1], cells[2], cells[3].strip("`")
        assert name not in rows, f"{name} documented twice"
        rows[name] = (kind, unit, tuple(label.strip() for label in labels.split(",") if label.strip()))
    return rows


def emitted(snapshot) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    return {f.spec.name: (f.spec.kind, f.spec.unit, f.label_names) for f in build_families(snapshot)}


def test_the_rich_snapshot_exercises_every_family(rich_snapshot):
    assert set(emitted(rich_snapshot)) == {spec.name for spec in ALL_FAMILIES}


@pytest.mark.parametrize("with_tenant", [True, False])
def test_doc_table_matches_emitted_families(snapshot_factory, with_tenant):
    snapshot = snapshot_factory(tenant_label="team" if with_tenant else None)
    docs = documented()
    actual = emitted(snapshot)
    assert set(docs) == set(actual), "docs/metrics.md and the collector disagree on metric names"
    for name, (kind, unit, labels) in actual.items():
        doc_kind, doc_unit, doc_labels = docs[name]
        assert (doc_kind, doc_unit) == (kind, unit), name
        expected = [label.rstrip("?") for label in doc_labels if with_tenant or not label.endswith("?")]
        assert sorted(expected) == sorted(labels), name
