"""`gpu-watchdog inventory`: this node's GPUs, their MIG layout and who holds each instance, as a table or JSON.

`probe` dumps every NVML call raw; an operator asking "what is on this node and whose is it" wants one line per
device: GPU index and model, MIG GPU instance / compute instance, profile, UUID, memory, its processes by mode
(compute, MPS client, graphics), and the pod holding it.
The devices come from one sample of the production sampler (the same enumeration the agent uses, go-nvlib's slot
walk included); the holders from the node's agent (`--agent-url`), which already joins the kubelet's assignments
and /proc to pods, so this command needs no kubelet socket of its own. Without an agent the holders are unknown,
and said so.
"""

from __future__ import annotations

import asyncio
import sys
import time
from types import ModuleType
from typing import Any

import aiohttp

from watchdog.answers.explain import device_series
from watchdog.sampling.sampler import NvmlSampler

GIB = 2**30


def _holders(agent_url: str) -> dict[str, list[str]]:
    """Device UUID (MIG UUID, or GPU UUID for a shared GPU) → "namespace/pod" holding it, from the agent."""

    async def fetch() -> str:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            async with session.get(f"{agent_url.rstrip('/')}/metrics", headers={"Accept": "text/plain"}) as answer:
                answer.raise_for_status()
                return await answer.text()

    holders: dict[str, list[str]] = {}
    for series in device_series(asyncio.run(fetch())):
        device = series.get("mig_uuid") or series.get("gpu_uuid", "")
        pod = f"{series['namespace']}/{series['pod']}"
        if pod not in holders.setdefault(device, []):
            holders[device].append(pod)
    return holders


def read_inventory(nvml: ModuleType, *, agent_url: str | None = None) -> list[dict[str, Any]]:
    """One row per MIG device, or per GPU not in MIG mode; ``holders`` is None when unknown."""
    sampler = NvmlSampler(nvml, node="", clock=time.time)
    sampler.open()  # NvmlUnavailable when NVML cannot start: worded by the CLI
    try:
        sample = sampler.sample(0)
    finally:
        sampler.close()
    holders: dict[str, list[str]] | None = None
    if agent_url:
        try:
            holders = _holders(agent_url)
        except (aiohttp.ClientError, TimeoutError) as exc:
            print(f"gpu-watchdog inventory: cannot ask the agent at {agent_url} ({exc or type(exc).__name__}); "
                  "holders unknown", file=sys.stderr)
    rows = []
    for gpu in sample.gpus:
        base = {"gpu": gpu.index, "gpu_uuid": gpu.uuid, "model": gpu.name, "mig": gpu.mig_enabled, "lost": gpu.lost}
        devices = gpu.instances if gpu.mig_enabled else (None,)
        for mig in devices:
            uuid = mig.uuid if mig is not None else gpu.uuid
            source = mig if mig is not None else gpu
            rows.append({
                **base,
                "gpu_instance": mig.gpu_instance if mig is not None else None,
                "compute_instance": mig.compute_instance if mig is not None else None,
                "profile": mig.profile if mig is not None else "",
                "uuid": uuid,
                "memory_total_bytes": source.memory_total_bytes,
                "memory_used_bytes": source.memory_used_bytes,
                # Each NVML process with the lists that reported it ("mps": an MPS client; model.ProcessSample).
                "processes": [{"pid": p.pid, "mode": p.mode, "used_memory_bytes": p.used_memory_bytes}
                              for p in source.processes],
                "holders": None if holders is None else holders.get(uuid, []),
            })
    return rows


def _memory(row: dict[str, Any]) -> str:
    used, total = row["memory_used_bytes"], row["memory_total_bytes"]
    if used is None or total is None:
        return "?"
    return f"{used / GIB:.1f}/{total / GIB:.0f} GiB"


def _processes(row: dict[str, Any]) -> str:
    """Process count per mode, e.g. "2 mps, 1 compute" (the MPS server is listed as a compute process)."""
    counts: dict[str, int] = {}
    for process in row.get("processes", ()):
        counts[process["mode"]] = counts.get(process["mode"], 0) + 1
    return ", ".join(f"{count} {mode}" for mode, count in counts.items()) or "-"


def format_table(rows: list[dict[str, Any]]) -> str:
    """Aligned columns, kubectl style: GPU, MODEL, GI, CI, PROFILE, UUID, MEMORY, PROCESSES, HELD BY."""
    table = [("GPU", "MODEL", "GI", "CI", "PROFILE", "UUID", "MEMORY", "PROCESSES", "HELD BY")]
    for row in rows:
        held = "?" if row["holders"] is None else (", ".join(row["holders"]) or "-")
        table.append((
            str(row["gpu"]), row["model"] + (" (lost)" if row["lost"] else ""),
            "-" if row["gpu_instance"] is None else str(row["gpu_instance"]),
            "-" if row["compute_instance"] is None else str(row["compute_instance"]),
            row["profile"] or ("whole GPU" if not row["mig"] else "?"), row["uuid"], _memory(row), _processes(row),
            held,
        ))
    widths = [max(len(line[column]) for line in table) for column in range(len(table[0]))]
    return "".join("   ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() + "\n"
                   for line in table)
