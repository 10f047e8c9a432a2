"""The render cache carries line parts across renders without ever changing a byte of what is written."""

from __future__ import annotations

import dataclasses

import pytest
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_latest_openmetrics
from prometheus_client.registry import CollectorRegistry

from watchdog.publishing import Exposition, build_registry
from watchdog.publishing.build import build_families
from watchdog.publishing.catalogue import FamilySpec
from watchdog.publishing.collector import to_metric
from watchdog.publishing.line_cache import MAX_VALUE_TEXTS, PREFIX_FLOOR, PREFIX_SLACK
from watchdog.publishing.render import new_render_cache, render_families
from watchdog.publishing.series import Family

GAUGE = FamilySpec("gpu_watchdog_thing_ratio", "gauge", "A thing.", ("node", "pod"))
COUNTER = FamilySpec("gpu_watchdog_events_total", "counter", "Events.", ("node", "kind"))


def reference(families: list[Family]) -> tuple[bytes, bytes]:
    """What prometheus_client writes for these families, in text 0.0.4 and OpenMetrics."""
    registry = CollectorRegistry()

    class Fixed:
        def collect(self):
            return [to_metric(family) for family in families]

    registry.register(Fixed())
    return generate_latest(registry), generate_latest_openmetrics(registry)


def families_of(rows: list[tuple[tuple[str, ...], float]], *, created: float | None = None) -> list[Family]:
    gauge, counter = Family(GAUGE, GAUGE.labels), Family(COUNTER, COUNTER.labels)
    for labels, value in rows:
        gauge.add(labels, value)
        counter.add(labels, abs(value) if value == value else 0, created=created)
    return [gauge, counter]


def assert_matches_reference(families: list[Family], cache) -> None:
    text, openmetrics = reference(families)
    assert render_families(families, openmetrics=False, cache=cache) == text
    assert render_families(families, openmetrics=True, cache=cache) == openmetrics


def test_values_that_compare_equal_but_print_differently_are_never_confused():
    """-0.0 == 0 and NaN != NaN: a value memo keyed by number must keep both out."""
    cache = new_render_cache()
    sequences = [0, -0.0, 0.0, -0.0, 0]
    for value in sequences:
        assert_matches_reference(families_of([(("n", "p"), value)]), cache)
    for _ in range(3):
        assert_matches_reference(families_of([(("n", "p"), float("nan"))]), cache)
    assert all(key == key and key != 0 for key in cache.value_texts)


@pytest.mark.parametrize("values", [[1, 1.0, True], [2**53, float(2**53), 2**53 + 1], [1e6, 1_000_000, 1e22]])
def test_equal_numbers_of_different_types_share_one_text_safely(values):
    cache = new_render_cache()
    for value in values + values[::-1]:
        assert_matches_reference(families_of([(("n", "p"), value)], created=1_700_000_000.25), cache)


def test_changing_labels_and_values_across_renders_stay_identical_to_prometheus_client():
    cache = new_render_cache()
    for cycle in range(6):
        rows = [((f"node-{cycle % 2}", f"pod-{i}"), i / 7 + cycle) for i in range(cycle, cycle + 5)]
        rows.append((('hostile "x"\\', f"p\n{cycle}"), -cycle * 1e7))
        assert_matches_reference(families_of(rows, created=float(cycle)), cache)


def test_the_cache_is_bounded_when_series_churn():
    cache = new_render_cache()
    emptied = False
    for cycle in range(40):
        rows = [(("n", f"pod-{cycle}-{i}"), cycle * 1000.5 + i) for i in range(100)]
        before = cache.prefix_count
        assert_matches_reference(families_of(rows), cache)
        emptied = emptied or cache.prefix_count < before
        assert cache.prefix_count <= PREFIX_SLACK * 200 + PREFIX_FLOOR  # 200 series per render (gauge + counter)
        assert len(cache.value_texts) <= MAX_VALUE_TEXTS
    assert emptied


def test_exposition_bodies_match_prometheus_client_across_snapshots(snapshot_factory):
    """The Exposition keeps one cache for its lifetime: every new snapshot is still written exactly."""
    exposition = Exposition(lambda: None)
    first = snapshot_factory()
    for step, snapshot in enumerate([first, snapshot_factory(node="other"), first,
                                     dataclasses.replace(first, evictions={("evicted", "quota", "ml"): 3})]):
        registry = build_registry(lambda snapshot=snapshot: snapshot)
        text = exposition.body(snapshot=snapshot, openmetrics=False, gzipped=False)
        openmetrics = exposition.body(snapshot=snapshot, openmetrics=True, gzipped=False)
        assert text == generate_latest(registry), step
        assert openmetrics == generate_latest_openmetrics(registry), step
        assert render_families(build_families(snapshot), openmetrics=False, cache=new_render_cache()) == text


def test_value_texts_are_emptied_past_their_bound():
    cache = new_render_cache()
    for step in range(MAX_VALUE_TEXTS + 10):
        assert cache.value_text(step + 0.5) == f"{step + 0.5!r}\n"
    assert len(cache.value_texts) == MAX_VALUE_TEXTS + 10
    cache.trim(series_rendered=1)
    assert cache.value_texts == {}
