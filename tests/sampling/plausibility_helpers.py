"""Builders for the plausibility gate tests: a plausible H100 MIG node that each test spoils in one place."""

from __future__ import annotations

import dataclasses

from watchdog.model import GpuSample, MigSample, NodeSample, ProcessSample, XidEvent

GIB = 1 << 30


def mig(gpu_index: int, slot: int, **changes) -> MigSample:
    sample = MigSample(
        uuid=f"MIG-{gpu_index}-{slot}", gpu_index=gpu_index, gpu_instance=7 + slot, compute_instance=0,
        profile="1g.10gb", memory_total_bytes=10 * GIB, memory_used_bytes=3 * GIB, memory_reserved_bytes=GIB // 64,
        dram_bw_util=0.3, sm_util=0.5, sm_occupancy=0.4, pcie_tx_bytes_per_second=2e9, pcie_rx_bytes_per_second=1e9,
        processes=(ProcessSample(pid=1000 + 10 * gpu_index + slot, used_memory_bytes=3 * GIB,
                                 gpu_instance=7 + slot, compute_instance=0),),
    )
    return dataclasses.replace(sample, **changes)


def gpu(index: int, *, instances: int = 7, **changes) -> GpuSample:
    sample = GpuSample(
        index=index, uuid=f"GPU-{index}", name="NVIDIA H100 80GB HBM3", mig_enabled=True,
        memory_total_bytes=80 * GIB, memory_used_bytes=21 * GIB, memory_reserved_bytes=GIB // 2, power_watts=400.0,
        power_limit_watts=700.0, temperature_celsius=55.0, sm_clock_mhz=1755.0, sm_clock_max_mhz=1980.0,
        clock_event_reasons=0, pcie_tx_bytes_per_second=3e9, pcie_rx_bytes_per_second=1e9,
        pcie_link_bytes_per_second=50e9, instances=tuple(mig(index, slot) for slot in range(instances)),
    )
    return dataclasses.replace(sample, **changes)


def shared_gpu(index: int, **changes) -> GpuSample:
    """A time-sliced GPU (no MIG) with two processes."""
    sample = GpuSample(
        index=index, uuid=f"GPU-{index}", name="NVIDIA A100-SXM4-40GB", memory_total_bytes=40 * GIB,
        memory_used_bytes=12 * GIB, memory_reserved_bytes=GIB // 2, gpu_util=0.8, memory_util=0.3,
        power_watts=250.0, power_limit_watts=400.0, temperature_celsius=60.0, sm_clock_mhz=1410.0,
        sm_clock_max_mhz=1410.0, pcie_link_bytes_per_second=25e9,
        processes=(ProcessSample(pid=7, used_memory_bytes=8 * GIB, sm_util=0.6, memory_util=0.2),
                   ProcessSample(pid=8, used_memory_bytes=4 * GIB, sm_util=0.2, memory_util=0.1)),
    )
    return dataclasses.replace(sample, **changes)


def node(tick: int = 1, *, gpus: tuple[GpuSample, ...] | None = None, xids: tuple[XidEvent, ...] = (),
         generation: int = 1) -> NodeSample:
    if gpus is None:
        gpus = (gpu(0, instances=3), shared_gpu(1))
    return NodeSample(node="n", tick=tick, timestamp=1000.0 + tick, gpus=gpus, xids=xids,
                      layout_generation=generation)


def xid(gpu_index: int = 0, number: int = 79, **changes) -> XidEvent:
    event = XidEvent(gpu_index=gpu_index, gpu_uuid=f"GPU-{gpu_index}", xid=number, event_type=0x8, timestamp=1000.0)
    return dataclasses.replace(event, **changes)


def replace_gpu(sample: NodeSample, position: int, /, **changes) -> NodeSample:
    """``sample`` with the GPU at ``position`` changed."""
    gpus = list(sample.gpus)
    gpus[position] = dataclasses.replace(gpus[position], **changes)
    return dataclasses.replace(sample, gpus=tuple(gpus))


def replace_mig(sample: NodeSample, position: int, slot: int, /, **changes) -> NodeSample:
    """``sample`` with MIG device ``slot`` of the GPU at ``position`` changed."""
    instances = list(sample.gpus[position].instances)
    instances[slot] = dataclasses.replace(instances[slot], **changes)
    return replace_gpu(sample, position, instances=tuple(instances))
