"""An MPS client near its pinned device-memory limit: reported with the limit in its evidence, never acted on.

Pure (no I/O). Under the device plugin's MPS sharing each client may pin at most the GPU's memory / replicas
(model/sharing.py); past it its own allocations fail with an out-of-memory error while the other clients are
untouched. That is worth telling the client's owner before it happens (a model that grew, a batch size raised),
and it is nobody else's fault, so the finding is a warning of its own kind (``FindingKind.MPS_MEMORY_LIMIT``,
report-only). A client's use is its processes' ``usedGpuMemory`` on the GPU summed (the MPS server's own context is
infrastructure and never counted, attribution/proc.py). Hysteresis: it starts at ``limit_ratio`` of the limit for
``for_ticks`` ticks and ends below ``limit_ratio − band_ratio``; a tick without a reading neither starts nor ends it.
"""

from __future__ import annotations

from typing import Callable

from watchdog.config.detection import DetectionPolicy
from watchdog.detection.runs import Runs, report_open
from watchdog.detection.view import DEVICES, TickView
from watchdog.model import Finding, FindingKind, PodRef, Severity

GIB = float(1 << 30)


class MpsMemoryDetector:
    """One finding per (GPU, client pod) near the client's limit."""

    name = "mps_memory"
    needs = frozenset({DEVICES})

    def __init__(self, policy: DetectionPolicy, *, tenant_of: Callable[[PodRef], str]) -> None:
        self._policy = policy.mps
        self._tenant_of = tenant_of
        self._runs = Runs()
        self._open: dict[str, Finding] = {}

    def set_policy(self, policy: DetectionPolicy) -> None:
        self._policy = policy.mps

    def step(self, view: TickView) -> list[Finding]:
        policy = self._policy
        if not policy.enabled:
            self._runs, self._open = Runs(), {}
            return []
        tick, timestamp = view.tick, view.timestamp
        for device in view.devices or ():
            limits = device.mps
            if limits is None or not device.memory_total:
                continue
            limit = limits.memory_limit_bytes(device.memory_total)
            if limit <= 0:
                continue
            for ref in device.pods:
                used = device.pod_memory.get(ref.key)
                if used is None:
                    continue  # no reading: the run and any open finding stand as they are
                key = f"mps-memory/{device.uuid}/{ref.key}"
                ratio = used / limit
                is_open = key in self._open
                if ratio < policy.limit_ratio - (policy.band_ratio if is_open else 0.0):
                    self._runs.end(key)
                    self._open.pop(key, None)
                    continue
                run = self._runs.hold(key, tick=tick, timestamp=timestamp, for_ticks=policy.for_ticks)
                if not run.active:
                    continue
                self._open[key] = Finding(
                    kind=FindingKind.MPS_MEMORY_LIMIT,
                    key=key,
                    domain=f"mps/{device.gpu.uuid}",
                    resource="memory",
                    severity=Severity.WARNING,
                    first_tick=run.first_tick,
                    last_tick=tick,
                    since=run.since,
                    culprit=ref,
                    tenant=self._tenant_of(ref),
                    evidence={
                        "used_bytes": int(used),
                        "limit_bytes": int(limit),
                        "usage": round(ratio, 4),
                        "limit_ratio": policy.limit_ratio,
                        "replicas": limits.replicas,
                        "limit_source": limits.source or "unknown",
                    },
                    usage={ref.key: float(used)},
                    needed=max(0.0, float(used) - policy.limit_ratio * limit),
                    message=(f"MPS client {ref.key} uses {used / GIB:.2f} GiB of its {limit / GIB:.2f} GiB pinned "
                             f"device-memory limit ({ratio:.0%}; {device.gpu.uuid} shared by {limits.replicas} "
                             f"replicas): its next allocations past the limit fail"),
                    gpu_uuid=device.gpu.uuid,
                )
        return report_open(self._open, self._runs, tick=tick, stale_ticks=policy.stale_ticks)

