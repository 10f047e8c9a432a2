"""The custom Collector: scrape-time families, its own registry, no calls before a scrape."""

from __future__ import annotations

from prometheus_client import REGISTRY, generate_latest

from watchdog.model import Snapshot
from watchdog.publishing import SnapshotCollector, build_registry


def test_registry_is_private_and_holds_only_our_families(rich_snapshot):
    registry = build_registry(lambda: rich_snapshot)
    assert registry is not REGISTRY
    names = {metric.name for metric in registry.collect()}
    assert names and all(name.startswith("gpu_watchdog_") for name in names)
    assert b"gpu_watchdog_" not in generate_latest(REGISTRY)
    assert b"python_gc" not in generate_latest(registry)


def test_registering_does_not_call_the_provider():
    calls = []

    def provider():
        calls.append(1)
        return Snapshot(node="n")

    registry = build_registry(provider)
    assert calls == []
    list(registry.collect())
    assert calls == [1]


def test_each_collect_reads_the_latest_snapshot():
    current = {"snapshot": Snapshot(node="n", ready=False)}
    collector = SnapshotCollector(lambda: current["snapshot"])

    def ready_value():
        ready = next(metric for metric in collector.collect() if metric.name == "gpu_watchdog_ready")
        return ready.samples[0].value

    assert ready_value() == 0
    current["snapshot"] = Snapshot(node="n", ready=True)
    assert ready_value() == 1


def test_no_snapshot_yet_collects_nothing():
    assert list(SnapshotCollector(lambda: None).collect()) == []
    assert generate_latest(build_registry(lambda: None)) == b""


def test_counter_types_survive_the_conversion(rich_snapshot):
    metrics = {metric.name: metric for metric in SnapshotCollector(lambda: rich_snapshot).collect()}
    assert metrics["gpu_watchdog_xid_errors"].type == "counter"
    assert metrics["gpu_watchdog_gpu_power_watts"].type == "gauge"
    assert metrics["gpu_watchdog_gpu_power_watts"].unit == "watts"
    assert {s.name for s in metrics["gpu_watchdog_evictions"].samples} == {"gpu_watchdog_evictions_total"}
