"""Small builders for hand-made NodeSample/Attribution sequences used by the detection tests."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from watchdog.model import (Attribution, GpuSample, MigSample, NodeSample, PodIndex, PodInfo, PodRef, ProcessSample,
                            XidEvent)

GIB = 1 << 30
SW_POWER_CAP = 0x4
GPU_IDLE = 0x1
MAX_CLOCK = 1980.0


def pod(
    namespace: str,
    name: str,
    *,
    priority: int = 0,
    created: float = -3600.0,
    request: int | None = None,
    labels: dict[str, str] | None = None,
) -> PodInfo:
    return PodInfo(
        uid=f"uid-{namespace}-{name}",
        namespace=namespace,
        name=name,
        node="n1",
        labels=labels or {},
        priority=priority,
        created=created,
        gpu_memory_request_bytes=request,
    )


def ref(info: PodInfo) -> PodRef:
    return info.ref


def proc(pid: int, *, mem: int | None = None, sm: float | None = None, memu: float | None = None) -> ProcessSample:
    return ProcessSample(pid=pid, used_memory_bytes=mem, sm_util=sm, memory_util=memu)


def mig(
    uuid: str,
    *,
    gi: int,
    ci: int = 0,
    profile: str = "1g.10gb",
    gpu_index: int = 0,
    total: int | None = 10 * GIB,
    used: int | None = 0,
    reserved: int | None = 0,
    sm: float | None = None,
    dram: float | None = None,
    processes: tuple[ProcessSample, ...] = (),
) -> MigSample:
    return MigSample(
        uuid=uuid,
        gpu_index=gpu_index,
        gpu_instance=gi,
        compute_instance=ci,
        profile=profile,
        memory_total_bytes=total,
        memory_used_bytes=used,
        memory_reserved_bytes=reserved,
        dram_bw_util=dram,
        sm_util=sm,
        processes=tuple(ProcessSample(p.pid, p.used_memory_bytes, gi, ci, None, None) for p in processes),
    )


def gpu(
    uuid: str,
    *,
    index: int = 0,
    instances: tuple[MigSample, ...] = (),
    processes: tuple[ProcessSample, ...] = (),
    clock: float | None = MAX_CLOCK,
    reasons: int | None = 0,
    gpu_util: float | None = None,
    total: int | None = 80 * GIB,
    used: int | None = 0,
    reserved: int | None = 0,
    lost: bool = False,
) -> GpuSample:
    return GpuSample(
        index=index,
        uuid=uuid,
        name="NVIDIA H100 80GB HBM3",
        mig_enabled=bool(instances),
        lost=lost,
        memory_total_bytes=None if instances else total,
        memory_used_bytes=None if instances else used,
        memory_reserved_bytes=None if instances else reserved,
        gpu_util=gpu_util,
        sm_clock_mhz=clock,
        sm_clock_max_mhz=MAX_CLOCK,
        clock_event_reasons=reasons,
        instances=instances,
        processes=processes,
    )


def sample(tick: int, gpus: tuple[GpuSample, ...] | list[GpuSample], *, xids: tuple[XidEvent, ...] = ()) -> NodeSample:
    return NodeSample(node="n1", tick=tick, timestamp=float(tick), gpus=tuple(gpus), xids=xids)


def attribution(
    *,
    devices: dict[str, list[PodInfo]],
    processes: dict[int, PodInfo] | None = None,
    extra_pods: list[PodInfo] = (),  # type: ignore[assignment]
    healthy: bool = True,
    tenant_label: str | None = None,
) -> Attribution:
    pods = {info.uid: info for infos in devices.values() for info in infos}
    pods.update({info.uid: info for info in (processes or {}).values()})
    pods.update({info.uid: info for info in extra_pods})
    return Attribution(
        devices={uuid: tuple(i.ref for i in infos) for uuid, infos in devices.items()},
        processes={pid: info.ref for pid, info in (processes or {}).items()},
        index=PodIndex(pods, tenant_label=tenant_label),
        healthy=healthy,
    )


@dataclass
class Noise:
    """Deterministic sensor noise."""

    seed: int = 7
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def __call__(self, value: float, scale: float) -> float:
        return float(min(1.0, max(0.0, value + self.rng.normal(0.0, scale))))


def diurnal(tick: int, *, low: float, high: float, period: int) -> float:
    return low + (high - low) * (0.5 - 0.5 * math.cos(2 * math.pi * tick / period))
