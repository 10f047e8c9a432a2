"""The cluster's own monitoring, simulated: dcgm-exporter's per-instance activity and tenants' latency signals.

The agent borrows per-GPU-instance activity from dcgm-exporter where NVML has none (an A100 in MIG mode has no
GPM), and a tenant may judge interference by its own p99 latency. Both reach the live agent through Prometheus; an
evaluation run hands them in directly, computed here from the same tick state the simulated NVML answers from, so
that they agree with the GPU's physics: DCGM_FI_PROF_SM_ACTIVE is the work an instance's SMs get done (busy ×
clock factor, like GPM's SM_UTIL), and a request served at a lower clock takes proportionally longer, as does one
whose GPU instance's DRAM bandwidth is shared with a neighbour compute instance that takes more of it.
"""

from __future__ import annotations

import numpy as np

from watchdog.model import InstanceActivity, instance_key
from watchdog.testbed.gpu_node import SimulatedGpuNode
from watchdog.testbed.scenario import stable_digest


def dcgm_activity(node: SimulatedGpuNode, tick: int) -> dict[str, InstanceActivity]:
    """What dcgm-exporter publishes per GPU instance at ``tick``: "<GPU UUID>/<GI id>" → its activity."""
    state = node.state(tick)
    activity: dict[str, InstanceActivity] = {}
    for gpu in state.gpus:
        if not gpu.layout.mig_enabled or node.is_lost(gpu.index, tick):
            continue
        for domain in gpu.instances.values():
            layout = domain.layout
            assert layout is not None
            activity[instance_key(node.gpu_uuids[gpu.index], layout.gpu_instance)] = InstanceActivity(
                sm=round(domain.sm, 4), dram=round(domain.dram, 4), graphics=round(domain.busy, 4))
    return activity


class LatencySignals:
    """Each configured pod's p99 latency per tick, deterministic in the scenario's seed."""

    def __init__(self, node: SimulatedGpuNode) -> None:
        self._node = node
        self._rng = np.random.default_rng(int.from_bytes(stable_digest(node.scenario.seed, "latency")[:8], "big"))

    def at(self, tick: int) -> dict[str, float]:
        scenario, node = self._node.scenario, self._node
        if not scenario.monitoring.latency:
            return {}
        state = node.state(tick)
        pods = {pod.key: pod for pod in scenario.pods}
        values: dict[str, float] = {}
        for key, spec in sorted(scenario.monitoring.latency.items()):
            pod = pods.get(key)
            noise = float(self._rng.normal(0.0, spec.noise)) if spec.noise else 0.0
            if pod is None or pod.device is None or not pod.running(tick):
                continue
            gpu = state.gpus[pod.device.gpu]
            factor = gpu.sm_clock_mhz / node.models[pod.device.gpu].sm_clock_max_mhz
            slowdown = next((p.dram_slowdown for p in gpu.whole.processes if p.pod is pod), 1.0)  # a split GI's DRAM
            values[key] = round(spec.base / max(factor, 0.05) * slowdown * (1.0 + noise), 6)
        return values
