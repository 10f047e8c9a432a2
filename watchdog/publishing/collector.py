"""The prometheus_client side: one custom Collector over the latest Snapshot, in a registry of its own.

client_python's recommended shape for exporters (https://prometheus.github.io/client_python/collector/custom/):
``collect()`` yields metric families built at scrape time from current state, rather than gauges set all over
the code. The registry is never the process-global ``REGISTRY``, so tests and several agents in one process do
not see each other's series. The server renders with the faster ``render`` module; this collector is the
reference it is checked against and the way to plug the agent into any prometheus_client tooling.
"""

from __future__ import annotations

from typing import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from watchdog.publishing.build import build_families
from watchdog.publishing.series import Family, SnapshotProvider


def to_metric(family: Family) -> Metric:
    """One prometheus_client metric family with the same samples as ``family``."""
    spec = family.spec
    names = list(family.label_names)
    if spec.kind == "counter":
        counter = CounterMetricFamily(spec.name, spec.help, labels=names, unit=spec.unit)
        for values, value, created in family.samples:
            counter.add_metric(values, value, created=created)
        return counter
    gauge = GaugeMetricFamily(spec.name, spec.help, labels=names, unit=spec.unit)
    for values, value, _created in family.samples:
        gauge.add_metric(values, value)
    return gauge


class SnapshotCollector(Collector):
    """Yields the families of whatever snapshot the provider returns now; nothing when there is none yet."""

    def __init__(self, snapshot_provider: SnapshotProvider) -> None:
        self._snapshot_provider = snapshot_provider

    def describe(self) -> list[Metric]:
        # Registering must not call the provider (the agent may not have a snapshot yet); with describe()
        # defined, CollectorRegistry.register does not fall back to collect().
        return []

    def collect(self) -> Iterator[Metric]:
        snapshot = self._snapshot_provider()
        if snapshot is None:
            return
        for family in build_families(snapshot):
            yield to_metric(family)


def build_registry(snapshot_provider: SnapshotProvider) -> CollectorRegistry:
    """A fresh registry holding only the snapshot collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot_provider))
    return registry
