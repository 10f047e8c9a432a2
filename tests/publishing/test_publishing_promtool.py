"""Prometheus' own linter accepts what we expose (the node_exporter practice of checking /metrics with promtool)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from watchdog.publishing import render

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def promtool_check(body: bytes) -> subprocess.CompletedProcess:
    # `promtool check metrics` reads the text format from stdin and lints names, units, HELP and counters.
    return subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True, timeout=60, check=False)


@pytest.mark.parametrize("tenant_label", ["team", None])
def test_promtool_accepts_the_exposition(snapshot_factory, tenant_label):
    result = promtool_check(render(snapshot_factory(tenant_label=tenant_label), False))
    assert result.returncode == 0, (result.stdout + result.stderr).decode()
    assert result.stdout.strip() == b"" and result.stderr.strip() == b""


def test_promtool_is_strict_enough_to_catch_a_bad_name():
    """Guards the check itself: a gauge ending in _total is a lint problem promtool must report."""
    bad = b"# HELP bad_total A gauge named like a counter.\n# TYPE bad_total gauge\nbad_total 1\n"
    result = promtool_check(bad)
    assert result.returncode != 0
    assert b"_total" in result.stdout + result.stderr
