"""What /metrics answers: format negotiation, optional gzip, and bodies cached per snapshot.

The agent publishes one immutable Snapshot per cycle (1 s by default) while Prometheus, a second Prometheus and
someone's curl may scrape more often; a body is therefore rendered at most once per (snapshot, format, encoding)
and reused until the pipeline hands over a new snapshot object.
"""

from __future__ import annotations

import gzip

from watchdog.model import Snapshot
from watchdog.publishing.build import build_families
from watchdog.publishing.render import (
    OPENMETRICS_CONTENT_TYPE,
    TEXT_CONTENT_TYPE,
    new_render_cache,
    render_families,
)
from watchdog.publishing.series import Family, SnapshotProvider

def _media_ranges(header: str) -> list[tuple[str, float]]:
    """(lower-case media type or coding, q) for each entry of an Accept / Accept-Encoding header (RFC 9110 §12.5)."""
    ranges = []
    for entry in header.split(","):
        parts = [part.strip() for part in entry.split(";")]
        if not parts[0]:
            continue
        quality = 1.0
        for parameter in parts[1:]:
            key, _, value = parameter.partition("=")
            if key.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0  # a malformed weight is no acceptance (never an error for the scraper)
        ranges.append((parts[0].lower(), quality))
    return ranges


def wants_openmetrics(accept: str | None) -> bool:
    """True when the client prefers OpenMetrics at least as much as the Prometheus text format.

    Prometheus sends e.g. ``application/openmetrics-text;version=1.0.0;q=0.5,…,text/plain;version=0.0.4;q=0.3,
    */*;q=0.2`` (scrape_protocols in prometheus/config); with no Accept header we answer text 0.0.4, as
    client_python's ``choose_encoder`` does. Any OpenMetrics version is answered with 1.0.0, the one we write.
    """
    best_openmetrics = 0.0
    best_text = 0.0
    for media_type, quality in _media_ranges(accept or ""):
        if media_type == "application/openmetrics-text":
            best_openmetrics = max(best_openmetrics, quality)
        elif media_type in ("text/plain", "text/*", "*/*"):
            best_text = max(best_text, quality)
    return best_openmetrics > 0 and best_openmetrics >= best_text


def accepts_gzip(accept_encoding: str | None) -> bool:
    return any(coding in ("gzip", "x-gzip") and q > 0 for coding, q in _media_ranges(accept_encoding or ""))


def content_type(*, openmetrics: bool) -> str:
    return OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE


class Exposition:
    """Rendered bodies of the latest snapshot, each format/encoding rendered once per snapshot object."""

    def __init__(self, snapshot_provider: SnapshotProvider, *, gzip_level: int = 1) -> None:
        if not 1 <= gzip_level <= 9:
            raise ValueError(f"gzip_level must be 1–9, got {gzip_level}")
        self._snapshot_provider = snapshot_provider
        self._gzip_level = gzip_level
        self._snapshot: Snapshot | None = None  # held so its id() cannot be reused by a new object
        self._families: list[Family] | None = None
        self._bodies: dict[tuple[bool, bool], bytes] = {}
        self._render_cache = new_render_cache()  # line parts that repeat from one snapshot to the next
        self.renders = 0  # bodies actually rendered (not served from the cache), for tests and benchmarks

    def latest(self) -> Snapshot | None:
        return self._snapshot_provider()

    def body(self, *, snapshot: Snapshot, openmetrics: bool, gzipped: bool) -> bytes:
        """The body for ``snapshot`` in the asked format, from the cache when it is still the same object."""
        if snapshot is not self._snapshot:
            self._snapshot, self._families, self._bodies = snapshot, None, {}
        key = (openmetrics, gzipped)
        cached = self._bodies.get(key)
        if cached is not None:
            return cached
        if gzipped:
            plain = self.body(snapshot=snapshot, openmetrics=openmetrics, gzipped=False)
            body = gzip.compress(plain, compresslevel=self._gzip_level, mtime=0)
        else:
            if self._families is None:
                self._families = build_families(snapshot)
            body = render_families(self._families, openmetrics=openmetrics, cache=self._render_cache)
            self.renders += 1
        self._bodies[key] = body
        return body
