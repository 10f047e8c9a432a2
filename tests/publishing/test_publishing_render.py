"""The fast renderer writes exactly what prometheus_client writes, in both formats, and parsers accept it."""

from __future__ import annotations

import dataclasses
import math

import pytest
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_latest_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

from watchdog.model import PodRef, Snapshot
from watchdog.publishing import build_registry, render
from watchdog.publishing.catalogue import FamilySpec
from watchdog.publishing.collector import to_metric
from watchdog.publishing.render import escape_label_value, format_value, render_families
from watchdog.publishing.series import Family


def both_formats(registry: CollectorRegistry) -> tuple[bytes, bytes]:
    return generate_latest(registry), generate_latest_openmetrics(registry)


@pytest.mark.parametrize("tenant_label", ["team", None])
def test_byte_identical_to_prometheus_client(snapshot_factory, tenant_label):
    snapshot = snapshot_factory(tenant_label=tenant_label)
    text, openmetrics = both_formats(build_registry(lambda: snapshot))
    assert render(snapshot, False) == text
    assert render(snapshot, True) == openmetrics
    assert openmetrics.endswith(b"# EOF\n")


def test_byte_identical_with_label_values_that_need_escaping(snapshot_factory):
    hostile = 'a\\b"c\nd é'
    snapshot = snapshot_factory(
        node='node "quoted"\\x',
        errors={("attribution", hostile): 1},
        evictions={("error", "reason\nwith newline", "ns"): 2},
    )
    text, openmetrics = both_formats(build_registry(lambda: snapshot))
    assert render(snapshot, False) == text
    assert render(snapshot, True) == openmetrics
    assert b'error="a\\\\b\\"c\\nd \xc3\xa9"' in text


def test_counters_with_created_and_hostile_help_match_both_formats():
    """`_created` goes to its own gauge family in text 0.0.4 and follows `_total` in OpenMetrics."""
    counter = FamilySpec("gpu_watchdog_things_total", "counter", 'Things "quoted" \\ and\nnewline.', ("node", "kind"))
    gauge = FamilySpec("gpu_watchdog_size_bytes", "gauge", "Size.", ("node",), unit="bytes")
    bare = FamilySpec("gpu_watchdog_plain_total", "counter", "No created.", ())
    families = [Family(counter, counter.labels), Family(gauge, gauge.labels), Family(bare, ())]
    families[0].add(("n", "b"), 3, created=1_700_000_000.5)
    families[0].add(("n", "a"), 0.5, created=None)
    families[0].add(("n", "c"), 7, created=12.0)
    families[1].add(("n",), 1e22)
    families[2].add((), 1)

    registry = CollectorRegistry()

    class Fixed:
        def collect(self):
            return [to_metric(family) for family in families]

    registry.register(Fixed())
    text, openmetrics = both_formats(registry)
    assert render_families(families, openmetrics=False) == text
    assert render_families(families, openmetrics=True) == openmetrics
    assert b"# TYPE gpu_watchdog_things_created gauge" in text
    assert b"# UNIT gpu_watchdog_size_bytes bytes" in openmetrics


@pytest.mark.parametrize(
    "value",
    [0, 1, -1, 0.0, -0.0, 0.1, 1 / 3, 2.5e-9, 123456.0, 1234567.0, 1e6, 1e7, 12345678.9, 1.7e9, 1_700_000_123.25,
     80 * 1024**3, 2**53 + 1, 1e16, 1e17, 1.5e300, -1234567.0, float("inf"), float("-inf"), float("nan"), True,
     999999.9999999999, 999999.0, 1e6 - 1e-9, 5e-324, -5e-324, 1e-5, -1e300, 2**63, -(2**63)],
)
def test_format_value_matches_go_string(value):
    assert format_value(value) == floatToGoString(value)


def test_escape_label_value():
    assert escape_label_value("plain") == "plain"
    assert escape_label_value('x\\y"z\n') == 'x\\\\y\\"z\\n'


def test_parsers_read_back_every_series(rich_snapshot):
    text_families = {family.name: family for family in parse_text(render(rich_snapshot, False).decode())}
    om_families = {family.name: family for family in parse_openmetrics(render(rich_snapshot, True).decode())}
    assert set(text_families) == set(om_families)
    xids = om_families["gpu_watchdog_xid_errors"]
    assert xids.type == "counter"
    assert {s.labels["xid"]: s.value for s in xids.samples if s.name.endswith("_total")} == {"79": 2, "13": 1}
    power = text_families["gpu_watchdog_gpu_power_watts"]
    assert sorted(s.value for s in power.samples) == [250.0, 412.5]
    assert om_families["gpu_watchdog_gpu_power_watts"].unit == "watts"
    for family in om_families.values():
        for sample in family.samples:
            assert not math.isnan(sample.value)


def test_render_refuses_what_is_not_a_snapshot():
    with pytest.raises(TypeError):
        render(None, False)


def test_render_is_deterministic(snapshot_factory):
    first = snapshot_factory()
    second = snapshot_factory(findings=tuple(first.findings))
    assert render(first, True) == render(second, True)
    changed = dataclasses.replace(first, findings=(dataclasses.replace(first.findings[1], culprit=PodRef("x", "y")),))
    assert render(changed, True) != render(first, True)
    assert b'culprit_pod="y"' in render(changed, False)
    assert render(Snapshot(node="n"), True).endswith(b"# EOF\n")
