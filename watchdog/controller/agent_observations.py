"""What the node agents published, read back from Prometheus for the isolation audit: who uses each GPU, and which
NVIDIA driver each node runs.

Without it the audit knows pods' nodes, not their GPUs, so a time-sliced node's tenants are "neighbours" even when
they sit on different GPUs of the node. The agents attribute every process to its pod per GPU
(``gpu_watchdog_pod_gpu_memory_used_bytes``, ``gpu_watchdog_mig_memory_used_bytes``, labelled with the parent
GPU's ``gpu_uuid``) and report the driver NVML gives them (``gpu_watchdog_build_info{driver_version}``); both are
instant queries over the Prometheus HTTP API (docs "HTTP API", /api/v1/query). A Prometheus that cannot be read is
one line of the report, and the audit falls back to what the API server says.
"""

from __future__ import annotations

from typing import Any, Mapping

import aiohttp

USERS_QUERY = ('count by (node, gpu_uuid, namespace) ({__name__=~"gpu_watchdog_pod_gpu_memory_used_bytes|'
               'gpu_watchdog_mig_memory_used_bytes", namespace!=""})')
DRIVERS_QUERY = 'max by (node, driver_version) (gpu_watchdog_build_info{driver_version!=""})'


async def _query(session: aiohttp.ClientSession, url: str, query: str) -> list[Mapping[str, str]]:
    async with session.get(f"{url.rstrip('/')}/api/v1/query", params={"query": query}) as response:
        body: Any = await response.json(content_type=None)
        if response.status != 200 or not isinstance(body, dict) or body.get("status") != "success":
            message = body.get("error") if isinstance(body, dict) else None
            raise ValueError(f"HTTP {response.status}: {message or 'not a Prometheus query answer'}")
    result = (body.get("data") or {}).get("result") or []
    return [sample.get("metric") or {} for sample in result if isinstance(sample, dict)]


async def read_agent_observations(url: str, *, timeout: float = 10.0) -> tuple[
        dict[tuple[str, str], frozenset[str]], dict[str, str], str | None]:
    """(GPU users by (node, gpu_uuid), driver version by node, error line or None)."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            users_rows = await _query(session, url, USERS_QUERY)
            driver_rows = await _query(session, url, DRIVERS_QUERY)
    except (aiohttp.ClientError, TimeoutError, ValueError) as error:
        return {}, {}, f"cannot read the agents' attribution from {url}: {type(error).__name__}: {error}"
    users: dict[tuple[str, str], set[str]] = {}
    for row in users_rows:
        if row.get("node") and row.get("gpu_uuid") and row.get("namespace"):
            users.setdefault((row["node"], row["gpu_uuid"]), set()).add(row["namespace"])
    drivers = {row["node"]: row["driver_version"] for row in driver_rows if row.get("node")}
    return {key: frozenset(value) for key, value in users.items()}, drivers, None
