"""Format negotiation, gzip, and the per-snapshot body cache."""

from __future__ import annotations

import dataclasses
import gzip

import pytest

from watchdog.publishing import Exposition, render
from watchdog.publishing.exposition import accepts_gzip, content_type, wants_openmetrics

PROMETHEUS_2_DEFAULT = (
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
PROMETHEUS_TEXT_FIRST = (
    "text/plain;version=0.0.4;q=0.5,application/openmetrics-text;version=1.0.0;q=0.4,*/*;q=0.1"
)


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, False),
        ("", False),
        ("*/*", False),
        ("text/plain", False),
        ("application/openmetrics-text", True),
        ("Application/OpenMetrics-Text; version=1.0.0", True),
        ("application/openmetrics-text;version=0.0.1", True),
        (PROMETHEUS_2_DEFAULT, True),
        (PROMETHEUS_TEXT_FIRST, False),
        ("application/openmetrics-text;q=0", False),
        ("application/openmetrics-text;q=bogus,text/plain", False),
        ("application/json, ,application/openmetrics-text", True),
    ],
)
def test_wants_openmetrics(accept, expected):
    assert wants_openmetrics(accept) is expected


@pytest.mark.parametrize(
    ("accept_encoding", "expected"),
    [(None, False), ("", False), ("gzip", True), ("br, gzip;q=0.5", True), ("gzip;q=0", False), ("deflate", False),
     ("x-gzip", True)],
)
def test_accepts_gzip(accept_encoding, expected):
    assert accepts_gzip(accept_encoding) is expected


def test_content_types():
    assert content_type(openmetrics=False) == "text/plain; version=0.0.4; charset=utf-8"
    assert content_type(openmetrics=True) == "application/openmetrics-text; version=1.0.0; charset=utf-8"


def test_same_snapshot_is_rendered_once_per_format(rich_snapshot):
    exposition = Exposition(lambda: rich_snapshot)
    first = exposition.body(snapshot=rich_snapshot, openmetrics=False, gzipped=False)
    again = exposition.body(snapshot=rich_snapshot, openmetrics=False, gzipped=False)
    assert first is again and exposition.renders == 1
    assert first == render(rich_snapshot, False)
    exposition.body(snapshot=rich_snapshot, openmetrics=True, gzipped=False)
    assert exposition.renders == 2


def test_gzip_body_is_the_plain_body_compressed(rich_snapshot):
    exposition = Exposition(lambda: rich_snapshot)
    zipped = exposition.body(snapshot=rich_snapshot, openmetrics=True, gzipped=True)
    assert gzip.decompress(zipped) == render(rich_snapshot, True)
    assert exposition.body(snapshot=rich_snapshot, openmetrics=True, gzipped=True) is zipped
    assert exposition.renders == 1


def test_new_snapshot_object_is_rendered_again(rich_snapshot):
    exposition = Exposition(lambda: rich_snapshot)
    exposition.body(snapshot=rich_snapshot, openmetrics=False, gzipped=False)
    equal_but_new = dataclasses.replace(rich_snapshot, ready=False)
    body = exposition.body(snapshot=equal_but_new, openmetrics=False, gzipped=False)
    assert exposition.renders == 2
    assert b"gpu_watchdog_ready{node=\"node-a\"} 0.0" in body


def test_bad_gzip_level_is_refused():
    with pytest.raises(ValueError, match="gzip_level"):
        Exposition(lambda: None, gzip_level=0)
