"""Per-MIG-instance activity borrowed from the cluster's dcgm-exporter series, for GPUs where NVML has none.

An A100/A30 in MIG mode has no GPM (nvmlGpmQueryDeviceSupport: not supported, nvml.h), so NVML cannot say how
busy each instance is and detection cannot name who drew the power that capped the clock. DCGM profiles each GPU
instance on those GPUs, and most clusters already scrape dcgm-exporter. Like the victim-signal queries, these run
here, off the cycle, on the same timer, client, timeouts and staleness rule; the cycle hands detection the latest
value per (GPU UUID, GPU instance id). A failing, empty or malformed answer is counted and its values age out, so
detection has no activity for those instances: it then reports a victim with culprit unknown, never a guess.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from typing import Awaitable, Callable, Mapping

import aiohttp

from watchdog.config import SignalsSettings
from watchdog.model import InstanceActivity, NodeSample, instance_key
from watchdog.service.prometheus_signals import error_kind, query_vector

log = logging.getLogger(__name__)

SIGNALS = ("sm", "dram", "graphics")  # InstanceActivity's fields, each read by its own query


def needs_borrowing(sample: NodeSample | None) -> frozenset[str]:
    """The UUIDs of the sample's MIG GPUs with an instance NVML gave no SM or DRAM activity for."""
    if sample is None:
        return frozenset()
    return frozenset(
        gpu.uuid for gpu in sample.gpus
        if gpu.mig_enabled and not gpu.lost
        and any(mig.sm_util is None or mig.dram_bw_util is None for mig in gpu.instances)
    )


class BorrowedActivity:
    """``values()`` is what the cycle passes to detection; ``run()`` keeps it fresh until cancelled.

    ``wanted`` answers, at each refresh, which GPUs (by UUID) need borrowed activity: the agent passes the latest
    sample's (``needs_borrowing``), so a node without such GPUs sends no query at all.
    """

    def __init__(
        self,
        settings: SignalsSettings,
        *,
        wanted: Callable[[], frozenset[str]],
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.wanted = wanted
        self.clock = clock
        self.sleep = sleep
        self.errors: Counter[str] = Counter()
        self.queries = 0
        self._values: dict[tuple[str, str], tuple[float, float]] = {}  # (instance key, signal) → (value, when)

    def values(self) -> dict[str, InstanceActivity]:
        """Instance key ("<GPU UUID>/<GI id>") → its fresh borrowed activity."""
        now = self.clock()
        fresh: dict[str, dict[str, float]] = {}
        for (key, signal), (value, when) in self._values.items():
            if now - when <= self.settings.stale_seconds:
                fresh.setdefault(key, {})[signal] = value
        return {key: InstanceActivity(**signals) for key, signals in fresh.items()}

    def _queries(self) -> dict[str, str]:
        borrowed = self.settings.borrowed_activity
        queries = {"sm": borrowed.sm_query, "dram": borrowed.dram_query, "graphics": borrowed.graphics_query}
        return {signal: query for signal, query in queries.items() if query}

    async def refresh(self, session: aiohttp.ClientSession) -> None:
        """Run each signal's query once for the GPUs that need it; a failing query keeps the others."""
        gpus = self.wanted()
        if not gpus:
            return
        # A regular expression inside a PromQL string: RE2's escapes, their backslashes escaped once more for the
        # string literal (PromQL's Go-style escapes; "\-" alone is a parse error).
        selector = "|".join(re.escape(uuid).replace("\\", "\\\\") for uuid in sorted(gpus))
        for signal, template in self._queries().items():
            self.queries += 1
            try:
                samples = await query_vector(session, base_url=self.settings.prometheus_url or "",
                                             query=template.replace("$gpus", selector),
                                             timeout_seconds=self.settings.timeout_seconds)
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
                self._failed(signal, error_kind(exc), exc)
                continue
            self._store(signal, samples, gpus=gpus)

    def _store(self, signal: str, samples: list[tuple[Mapping, float]], *, gpus: frozenset[str]) -> None:
        labels = self.settings.borrowed_activity
        now, stored = self.clock(), 0
        for series, value in samples:
            gpu, gi = series.get(labels.gpu_label), series.get(labels.gpu_instance_label)
            if gpu not in gpus:
                continue  # another node's GPU, or a whole-GPU series of this one (no GPU_I_ID): not ours to use
            try:
                instance = int(gi)
            except (TypeError, ValueError):
                self.errors["unlabelled"] += 1  # no or a non-numeric GPU instance id: never guess which one
                continue
            if not 0.0 <= value <= 1.0:
                self.errors["out_of_range"] += 1  # DCGM's PROF fields are ratios; a percentage is a wrong query
                continue
            self._values[(instance_key(gpu, instance), signal)] = (value, now)
            stored += 1
        if not stored:
            self._failed(signal, "empty", "no series for this node's GPU instances")

    def _failed(self, signal: str, kind: str, why: object) -> None:
        if not self.errors:
            log.warning("borrowed-activity query for %s failed (%s): %s", signal, kind, why)
        self.errors[kind] += 1

    async def run(self) -> None:
        if not self.settings.prometheus_url:
            return
        async with aiohttp.ClientSession() as session:
            while True:
                try:
                    await self.refresh(session)
                except Exception as exc:  # noqa: BLE001 - a bad answer degrades the activity, never the agent
                    log.exception("borrowed-activity refresh failed")
                    self.errors[type(exc).__name__.lower()] += 1
                await self.sleep(self.settings.refresh_seconds)
