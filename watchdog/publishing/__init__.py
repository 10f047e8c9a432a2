"""The publishing stage: the latest Snapshot as Prometheus metrics, plus the agent's health endpoints.

Only this package imports prometheus_client (import-linter contract in pyproject.toml).
"""

from watchdog.publishing.build import build_families
from watchdog.publishing.catalogue import ALL_FAMILIES, FamilySpec
from watchdog.publishing.collector import SnapshotCollector, build_registry
from watchdog.publishing.exposition import Exposition
from watchdog.publishing.render import render
from watchdog.publishing.server import MetricsServer

__all__ = [
    "ALL_FAMILIES",
    "Exposition",
    "FamilySpec",
    "MetricsServer",
    "SnapshotCollector",
    "build_families",
    "build_registry",
    "render",
]
