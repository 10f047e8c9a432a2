"""``gpu-watchdog probe`` as one report: the node's prerequisites first, then every NVML call the sampler makes.

The host's side of the prerequisites (kubelet socket, host PIDs, cgroups) is attribution's to read, the driver's
side (versions, persistence, MIG, GPM) sampling's; the two stages never import each other, so the order and the
join live here, where the agent's stages are wired. The host is read before NVML is touched, so a node without a
usable driver still gets its other lines.
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any, Callable

from watchdog.attribution.node_checks import host_prerequisites, read_host
from watchdog.sampling.probe import probe
from watchdog.sampling.probe_checks import nvml_prerequisites


def probe_node(
    nvml: ModuleType,
    *,
    kubelet_socket: str,
    proc_root: str,
    sleep: Callable[[float], None] = time.sleep,
    event_wait_ms: int = 100,
) -> dict[str, Any]:
    """The probe's JSON report with ``prerequisites``: the host's lines, then the driver's (see docs/probe.md)."""
    host = host_prerequisites(read_host(kubelet_socket=kubelet_socket, proc_root=proc_root))
    report = probe(nvml, sleep=sleep, event_wait_ms=event_wait_ms)
    report["prerequisites"] = [line.as_json() for line in [*host, *nvml_prerequisites(report)]]
    return report
