"""Fixtures for the trace tests: one tick with every field of every sample type set."""

from types import MappingProxyType

import pytest

from watchdog.model import (
    Attribution,
    ContainerInfo,
    GpuSample,
    MigSample,
    NodeSample,
    PodIndex,
    PodInfo,
    PodRef,
    ProcessSample,
    XidEvent,
)


def make_tick() -> tuple[NodeSample, Attribution]:
    mig = MigSample(
        uuid="MIG-aaaa",
        gpu_index=0,
        gpu_instance=1,
        compute_instance=0,
        profile="1g.10gb",
        memory_total_bytes=10 << 30,
        memory_used_bytes=3 << 30,
        memory_reserved_bytes=1 << 20,
        dram_bw_util=0.123456789,
        sm_util=0.9,
        sm_occupancy=None,
        processes=(ProcessSample(pid=4242, used_memory_bytes=3 << 30, gpu_instance=1, compute_instance=0),),
    )
    mig_gpu = GpuSample(
        index=0,
        uuid="GPU-0000",
        name="NVIDIA H100 80GB HBM3",
        mig_enabled=True,
        power_watts=699.125,
        power_limit_watts=700.0,
        temperature_celsius=71.0,
        sm_clock_mhz=1410.0,
        sm_clock_max_mhz=1980.0,
        clock_event_reasons=0x4,
        pcie_tx_bytes_per_second=1.5e9,
        pcie_rx_bytes_per_second=0.1,
        instances=(mig,),
    )
    shared_gpu = GpuSample(
        index=1,
        uuid="GPU-1111",
        name="NVIDIA A100-SXM4-40GB",
        memory_total_bytes=40 << 30,
        memory_used_bytes=12 << 30,
        gpu_util=1.0,
        memory_util=0.25,
        processes=(ProcessSample(pid=7, used_memory_bytes=None, sm_util=0.5, memory_util=0.1),),
    )
    lost_gpu = GpuSample(index=2, uuid="GPU-2222", name="NVIDIA A100-SXM4-40GB", lost=True)
    sample = NodeSample(
        node="node-a",
        tick=17,
        timestamp=1_700_000_017.25,
        gpus=(mig_gpu, shared_gpu, lost_gpu),
        xids=(XidEvent(gpu_index=0, gpu_uuid="GPU-0000", xid=13, event_type=8, timestamp=1_700_000_017.0,
                       gpu_instance=1, compute_instance=0, recovery_action=0),),
        driver_version="550.54.15",
    )
    ref = PodRef("ml", "trainer-0", uid="u-1", container="main")
    pod = PodInfo(
        uid="u-1",
        namespace="ml",
        name="trainer-0",
        node="node-a",
        labels=MappingProxyType({"tenant": "ml"}),
        annotations=MappingProxyType({"a": "b"}),
        priority=1000,
        priority_class="high",
        qos_class="Guaranteed",
        owner_kind="ReplicaSet",
        created=1_699_999_000.5,
        containers=(ContainerInfo("main", "abc123"),),
        gpu_memory_request_bytes=8 << 30,
        gpu_resources=("nvidia.com/mig-1g.10gb",),
    )
    attribution = Attribution(
        devices=MappingProxyType({"MIG-aaaa": (ref,), "GPU-1111": (PodRef("batch", "x", uid="u-2"),)}),
        processes=MappingProxyType({4242: ref}),
        index=PodIndex({"u-1": pod}),
        healthy=False,
        kubelet_ok=True,
        api_ok=False,
    )
    return sample, attribution


@pytest.fixture
def recorded_tick() -> tuple[NodeSample, Attribution]:
    """A MIG GPU, a time-sliced GPU and a lost GPU, an Xid and an unhealthy attribution, built fresh per test."""
    return make_tick()
