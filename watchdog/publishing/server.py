"""The agent's HTTP face: /metrics for Prometheus, /healthz for the liveness probe, /readyz for readiness, and the
read-only JSON API (/api/v1/findings, /api/v1/decisions: publishing/api.py).

Kubernetes restarts a container whose liveness probe fails and withholds traffic while readiness fails
(https://kubernetes.io/docs/tasks/configure-pod-container/configure-liveness-readiness-startup-probes/). So
/healthz reports only whether the agent loop still turns (an injected callable), never whether NVML or the API
answer — a flaky API server must not get every agent on the cluster restarted — and /readyz turns 200 once the
first full sample is in; listener.py keeps both answered while others hold every connection slot. A scrape only
formats the latest snapshot; it calls out to nothing. The standard process_* metrics come first in the body, read
per scrape; with gzip they are compressed in front of the cached compressed snapshot body, in one gzip member
(process_metrics.prepend_to_gzip), so the snapshot is still compressed once.
"""

from __future__ import annotations

import logging
from typing import Callable

from aiohttp import web

from watchdog.config.publishing import PublishingSettings
from watchdog.publishing.api import DecisionLog, JsonApi
from watchdog.publishing.exposition import Exposition, accepts_gzip, content_type, wants_openmetrics
from watchdog.publishing.listener import LimitedListener
from watchdog.publishing.process_metrics import ProcessMetrics, prepend_to_gzip
from watchdog.publishing.series import SnapshotProvider

log = logging.getLogger(__name__)

_VARY = "Accept, Accept-Encoding"


class MetricsServer:
    """Serves /metrics, /healthz and /readyz from the latest snapshot."""

    def __init__(
        self,
        snapshot_provider: SnapshotProvider,
        *,
        alive: Callable[[], bool],
        host: str = "0.0.0.0",
        port: int = 9435,
        gzip: bool = True,
        gzip_level: int = 1,
        idle_timeout: float = 30.0,
        max_connections: int = 32,
        process_metrics: ProcessMetrics | None = None,
        api: JsonApi | None = None,
    ) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be 0–65535, got {port}")
        self._exposition = Exposition(snapshot_provider, gzip_level=gzip_level)
        self._alive = alive
        self._host = host
        self._port = port
        self._gzip = gzip
        self._idle_timeout = idle_timeout
        self._max_connections = max_connections
        self._gzip_level = gzip_level
        self._process_metrics = process_metrics
        self._api = api
        self._listener: LimitedListener | None = None
        self.scrape_failures = 0  # scrapes answered 500; the error is logged with its traceback

    @classmethod
    def from_settings(
        cls,
        settings: PublishingSettings,
        *,
        snapshot_provider: SnapshotProvider,
        alive: Callable[[], bool],
        decisions: DecisionLog | None = None,
    ) -> MetricsServer:
        """The server the settings describe; with ``decisions``, also the JSON API (/api/v1/…)."""
        return cls(
            snapshot_provider,
            alive=alive,
            host=settings.host,
            port=settings.port,
            gzip=settings.gzip,
            gzip_level=settings.gzip_level,
            idle_timeout=settings.idle_timeout_seconds,
            max_connections=settings.max_connections,
            process_metrics=ProcessMetrics() if settings.process_metrics else None,
            api=JsonApi(snapshot_provider=snapshot_provider, decisions=decisions) if decisions is not None else None,
        )

    @property
    def exposition(self) -> Exposition:
        return self._exposition

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        if self._api is not None:
            self._api.add_routes(app)
        return app

    async def start(self) -> int:
        """Bind and serve; returns the bound port (the free one chosen when port was 0)."""
        if self._listener is not None:
            raise RuntimeError("MetricsServer already started")
        listener = LimitedListener(self.make_app(), host=self._host, port=self._port, idle_timeout=self._idle_timeout,
                                   max_connections=self._max_connections)
        port = await listener.start()
        self._listener = listener
        log.info("metrics server listening on %s:%d", self._host, port)
        return port

    @property
    def listener(self) -> LimitedListener | None:
        """The connections being served (None before start)."""
        return self._listener

    async def stop(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.stop()

    async def _metrics(self, request: web.Request) -> web.Response:
        try:
            snapshot = self._exposition.latest()
            if snapshot is None:
                return web.Response(status=503, text="no snapshot yet\n")
            openmetrics = wants_openmetrics(request.headers.get("Accept"))
            gzipped = self._gzip and accepts_gzip(request.headers.get("Accept-Encoding"))
            body = self._exposition.body(snapshot=snapshot, openmetrics=openmetrics, gzipped=gzipped)
            if self._process_metrics is not None:
                process = self._process_metrics.body(openmetrics=openmetrics)
                if process and gzipped:
                    plain = self._exposition.body(snapshot=snapshot, openmetrics=openmetrics, gzipped=False)
                    body = prepend_to_gzip(process, gzipped_tail=body, plain_tail=plain, level=self._gzip_level)
                else:
                    body = process + body
        except Exception:  # a bad snapshot must cost one scrape, never the server
            self.scrape_failures += 1
            log.exception("rendering /metrics failed")
            return web.Response(status=500, text="rendering metrics failed; see the agent log\n")
        headers = {"Content-Type": content_type(openmetrics=openmetrics), "Vary": _VARY}
        if gzipped:
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, headers=headers)

    async def _healthz(self, request: web.Request) -> web.Response:
        try:
            alive = bool(self._alive())
        except Exception:
            log.exception("liveness check raised")
            alive = False
        return web.Response(status=200 if alive else 503, text="ok\n" if alive else "agent loop not alive\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        try:
            snapshot = self._exposition.latest()
            ready = snapshot is not None and snapshot.ready
        except Exception:
            log.exception("readiness check raised")
            ready = False
        return web.Response(status=200 if ready else 503, text="ready\n" if ready else "waiting for first sample\n")
