"""Tenants' own victim signals, read from Prometheus for detection's per-tenant overrides.

A tenant can say "judge interference on my pods by my p99 latency" (detection.victim_signal_overrides). The query
runs here, off the cycle, on a timer; the cycle hands detection the latest value per "namespace/pod". A failing
or slow Prometheus is counted and its values age out, so detection simply has no override value for those pods
(it never reads an absence as "healthy" or as "degraded").
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from typing import Awaitable, Callable, Mapping

import aiohttp

from watchdog.config import SignalsSettings
from watchdog.config.runtime import RuntimePolicy
from watchdog.model.text import bounded

log = logging.getLogger(__name__)


def parse_vector(body: Mapping) -> dict[str, float]:
    """A Prometheus instant-vector answer → {"namespace/pod": value}; series without both labels are skipped."""
    return pod_values(vector_samples(body))


def pod_values(samples: list[tuple[Mapping, float]]) -> dict[str, float]:
    values: dict[str, float] = {}
    for labels, value in samples:
        namespace, pod = labels.get("namespace"), labels.get("pod")
        if namespace and pod:
            values[f"{namespace}/{pod}"] = value
    return values


def vector_samples(body: Mapping) -> list[tuple[Mapping, float]]:
    """A Prometheus instant-vector answer → its (labels, finite value) pairs; ValueError when it is no such answer
    (an error status, another result type, a body that is not a JSON object)."""
    if not isinstance(body, Mapping):  # an empty or non-JSON-object body (a proxy's 502 page, say)
        raise ValueError(f"expected a JSON object, got {type(body).__name__}")
    if body.get("status") != "success":
        raise ValueError(f"query failed: {body.get('errorType', '?')}: {body.get('error', '?')}")
    data = body.get("data") or {}
    if not isinstance(data, Mapping) or data.get("resultType") != "vector":
        raise ValueError(f"expected a vector, got {data.get('resultType') if isinstance(data, Mapping) else data!r}")
    samples: list[tuple[Mapping, float]] = []
    for series in data.get("result") or []:
        if not isinstance(series, Mapping):
            continue
        labels = series.get("metric") or {}
        if not isinstance(labels, Mapping):
            continue
        try:
            value = float(series["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if math.isfinite(value):
            samples.append((labels, value))
    return samples


async def query_vector(
    session: aiohttp.ClientSession, *, base_url: str, query: str, timeout_seconds: float
) -> list[tuple[Mapping, float]]:
    """One instant query; raises aiohttp.ClientError, asyncio.TimeoutError or ValueError (a malformed answer)."""
    url = f"{base_url.rstrip('/')}/api/v1/query"
    timeout = aiohttp.ClientTimeout(total=timeout_seconds)
    async with session.get(url, params={"query": query}, timeout=timeout) as response:
        body = await response.json(content_type=None)
    return vector_samples(body)


def error_kind(exc: BaseException) -> str:
    """The ``error`` label a failed query is counted under."""
    return "timeout" if isinstance(exc, asyncio.TimeoutError) else type(exc).__name__.lower()


class PrometheusSignals:
    """``values()`` is what the cycle passes to detection; ``run()`` keeps it fresh until cancelled."""

    def __init__(
        self,
        settings: SignalsSettings,
        *,
        runtime: RuntimePolicy,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.clock = clock
        self.sleep = sleep
        self.errors: Counter[str] = Counter()
        self.queries = 0
        self._values: dict[str, tuple[float, float]] = {}  # pod key → (value, when)

    def apply_runtime(self, runtime: RuntimePolicy) -> None:
        """A reloaded policy: its queries and its tenant label from the next refresh on."""
        self.runtime = runtime

    def values(self) -> dict[str, float]:
        now = self.clock()
        return {key: value for key, (value, when) in self._values.items()
                if now - when <= self.settings.stale_seconds}

    async def refresh(self, session: aiohttp.ClientSession) -> None:
        """Run every tenant's query once; a failing query keeps the others."""
        overrides = self.runtime.detection.victim_signal_overrides
        for tenant, override in overrides.items():
            self.queries += 1
            try:
                values = pod_values(await query_vector(session, base_url=self.settings.prometheus_url or "",
                                                         query=override.query,
                                                         timeout_seconds=self.settings.timeout_seconds))
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
                kind = error_kind(exc)
                if not self.errors:
                    log.warning("victim-signal query for tenant %s failed (%s): %s", tenant, kind, bounded(str(exc)))
                self.errors[kind] += 1
                continue
            now = self.clock()
            for key, value in values.items():
                # Tenants are namespaces unless a tenant label is configured: then the query's own selector
                # must keep to the tenant's pods, since the answer carries no label to check it by.
                if self.runtime.tenant_label is None and key.split("/", 1)[0] != tenant:
                    self.errors["foreign_series"] += 1
                    continue
                self._values[key] = (value, now)

    async def run(self) -> None:
        if not self.settings.prometheus_url:
            return
        async with aiohttp.ClientSession() as session:
            while True:
                if self.runtime.detection.victim_signal_overrides:
                    try:
                        await self.refresh(session)
                    except Exception as exc:  # noqa: BLE001 - a bad answer degrades the signals, never the agent
                        log.exception("victim-signal refresh failed")
                        self.errors[type(exc).__name__.lower()] += 1
                await self.sleep(self.settings.refresh_seconds)
