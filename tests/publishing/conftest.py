"""Hand-built snapshots for the publishing tests: MIG and time-sliced GPUs, pods, Xids, findings, a lost GPU."""

from __future__ import annotations

import dataclasses

import pytest

from watchdog.model import (
    Attribution,
    ClaimRef,
    ContainerInfo,
    Finding,
    FindingKind,
    GpuSample,
    MigSample,
    Mode,
    NodeSample,
    PodIndex,
    PodInfo,
    PodRef,
    ProcessSample,
    Severity,
    Snapshot,
    StageStatus,
    VgpuRunlist,
    VgpuSample,
    XidEvent,
)

GIB = 1024**3
H100_UUID = "GPU-11111111-aaaa-bbbb-cccc-000000000000"
A100_UUID = "GPU-22222222-aaaa-bbbb-cccc-000000000000"
LOST_UUID = "GPU-33333333-aaaa-bbbb-cccc-000000000000"
SPARSE_UUID = "GPU-44444444-aaaa-bbbb-cccc-000000000000"
VGPU_HOST_UUID = "GPU-55555555-aaaa-bbbb-cccc-000000000000"
VGPU_UUID = "7a1b2c3d-0000-4000-8000-000000000001"
VM_ID = "5e6f7a8b-0000-4000-8000-00000000000a"
MIG_OWNED = "MIG-aaaaaaaa-0000-0000-0000-000000000001"
MIG_SHARED = "MIG-aaaaaaaa-0000-0000-0000-000000000002"
MIG_IDLE = "MIG-aaaaaaaa-0000-0000-0000-000000000003"


def _pod(uid: str, namespace: str, name: str, *, team: str, priority: int, qos: str = "Guaranteed") -> PodInfo:
    return PodInfo(
        uid=uid,
        namespace=namespace,
        name=name,
        node="node-a",
        labels={"team": team, "app": name},
        priority=priority,
        priority_class=f"prio-{priority}",
        qos_class=qos,
        containers=(ContainerInfo("main", "abc"),),
    )


def build_rich_snapshot(*, tenant_label: str | None = "team") -> Snapshot:
    train = _pod("uid-train", "ml", "train-a", team="research", priority=1000)
    infer_b = _pod("uid-inf-b", "ml", "inf-b", team="research", priority=500)
    infer_c = _pod("uid-inf-c", "web", "inf-c", team="product", priority=2000, qos="Burstable")
    ts_one = _pod("uid-ts-1", "ml", "ts-1", team="research", priority=100, qos="BestEffort")
    ts_two = _pod("uid-ts-2", "batch", "ts-2", team="batch", priority=10)
    h100 = GpuSample(
        index=0, uuid=H100_UUID, name="NVIDIA H100 80GB HBM3", mig_enabled=True,
        memory_total_bytes=80 * GIB, memory_used_bytes=30 * GIB, memory_reserved_bytes=GIB // 2,
        power_watts=412.5, power_limit_watts=700.0, temperature_celsius=61.0,
        sm_clock_mhz=1755.0, sm_clock_max_mhz=1980.0, clock_event_reasons=0x0,
        pcie_tx_bytes_per_second=1.5e9, pcie_rx_bytes_per_second=2.25e9, pcie_link_bytes_per_second=63e9,
        instances=(
            MigSample(
                uuid=MIG_OWNED, gpu_index=0, gpu_instance=1, compute_instance=0, profile="3g.40gb",
                memory_total_bytes=40 * GIB, memory_used_bytes=10 * GIB, memory_reserved_bytes=12345,
                dram_bw_util=0.75, sm_util=0.5, sm_occupancy=0.25,
                pcie_tx_bytes_per_second=1.25e9, pcie_rx_bytes_per_second=2e9,
                ctxsw_active=0.0, ctxsw_per_second=0.0,  # one owner: never switched out
                processes=(ProcessSample(100, 10 * GIB, gpu_instance=1, compute_instance=0),),
            ),
            MigSample(
                uuid=MIG_SHARED, gpu_index=0, gpu_instance=2, compute_instance=0, profile="1g.10gb",
                memory_total_bytes=10 * GIB, memory_used_bytes=None, dram_bw_util=0.125, sm_util=0.9,
                processes=(
                    ProcessSample(200, 2 * GIB, gpu_instance=2, compute_instance=0),
                    ProcessSample(201, 3 * GIB, gpu_instance=2, compute_instance=0),
                    ProcessSample(202, None, gpu_instance=2, compute_instance=0),
                ),
            ),
            MigSample(uuid=MIG_IDLE, gpu_index=0, gpu_instance=3, compute_instance=0, profile="1g.10gb"),
        ),
    )
    a100 = GpuSample(
        index=1, uuid=A100_UUID, name="NVIDIA A100-SXM4-40GB",
        memory_total_bytes=40 * GIB, memory_used_bytes=9 * GIB, memory_reserved_bytes=0,
        gpu_util=0.8, memory_util=0.4, dram_bw_util=0.35, sm_util=0.6,
        power_watts=250.0, power_limit_watts=400.0, temperature_celsius=55.0,
        sm_clock_mhz=1410.0, sm_clock_max_mhz=1410.0, clock_event_reasons=0x4 | 0x20,
        pcie_tx_bytes_per_second=0.0, pcie_rx_bytes_per_second=1e6, ctxsw_active=0.0625, ctxsw_per_second=1500.0,
        processes=(
            ProcessSample(300, 2 * GIB, sm_util=0.25, memory_util=0.125),
            ProcessSample(301, 3 * GIB, sm_util=0.125, memory_util=None),
            ProcessSample(302, 4 * GIB, sm_util=0.2, memory_util=0.25),
            ProcessSample(303, GIB),  # no pod owns it
        ),
    )
    lost = GpuSample(index=2, uuid=LOST_UUID, name="NVIDIA H100 80GB HBM3", lost=True)
    sparse = GpuSample(index=3, uuid=SPARSE_UUID, name="NVIDIA L4", memory_total_bytes=24 * GIB)
    vgpu_host = GpuSample(
        index=4, uuid=VGPU_HOST_UUID, name="NVIDIA A100-SXM4-40GB", memory_total_bytes=40 * GIB,
        vgpu_scheduler="equal_share", vgpu_scheduler_arr="enabled", vgpu_timeslice_seconds=0.002,
        vgpu_runlists=(VgpuRunlist(runlist=0, run_seconds=12.5, slices=200),),
        vgpus=(VgpuSample(uuid=VGPU_UUID, type_name="GRID A100-10C", vm_id=VM_ID, vm_id_type="uuid",
                          fb_used_bytes=6 * GIB, fb_total_bytes=10 * GIB, sm_util=0.5, memory_util=0.25,
                          encoder_util=0.0, decoder_util=0.0),),
    )
    sample = NodeSample(
        node="node-a", tick=42, timestamp=1_700_000_123.25, gpus=(h100, a100, lost, sparse, vgpu_host),
        xids=(XidEvent(0, H100_UUID, 79, 8, 1_700_000_100.0, gpu_instance=1, compute_instance=0),),
        driver_version="570.86.15",
    )
    attribution = Attribution(
        devices={
            MIG_OWNED: (PodRef("ml", "train-a", "uid-train", "trainer"),),
            MIG_SHARED: (PodRef("ml", "inf-b", "uid-inf-b", "main"), PodRef("web", "inf-c", "uid-inf-c", "main")),
            A100_UUID: (PodRef("ml", "ts-1", "uid-ts-1", "a"), PodRef("batch", "ts-2", "uid-ts-2", "b")),
        },
        processes={
            100: PodRef("ml", "train-a", "uid-train", "trainer"),
            200: PodRef("ml", "inf-b", "uid-inf-b", "main"),
            201: PodRef("web", "inf-c", "uid-inf-c", "main"),
            300: PodRef("ml", "ts-1", "uid-ts-1", "a"),
            301: PodRef("ml", "ts-1", "uid-ts-1", "a"),
            302: PodRef("batch", "ts-2", "", "b"),  # no uid: the tenant is found by namespace/name
        },
        index=PodIndex.of((train, infer_b, infer_c, ts_one, ts_two), tenant_label=tenant_label),
        # train-a and ts-1 got their devices through DRA ResourceClaims; ts-2 through the device plugin.
        claims={(MIG_OWNED, "ml/train-a"): ClaimRef("ml", "train-a-mig"),
                (A100_UUID, "ml/ts-1"): ClaimRef("ml", "ts-1-gpu")},
        healthy=True, kubelet_ok=True, api_ok=True, slices_ok=True, claims_held=1,
    )
    findings = (
        Finding(
            kind=FindingKind.INTERFERENCE, key="interference/a100/dram", domain=f"timeslice/{A100_UUID}",
            resource="dram", severity=Severity.WARNING, first_tick=30, last_tick=42, since=1_700_000_000.0,
            victims=(PodRef("ml", "ts-1", "uid-ts-1"), PodRef("web", "inf-c", "uid-inf-c")),
            culprit=PodRef("batch", "ts-2", "uid-ts-2"),
        ),
        Finding(
            kind=FindingKind.UNAUTHORIZED, key="unauthorized/303", domain=f"gpu/{A100_UUID}", resource="device",
            severity=Severity.CRITICAL, first_tick=40, last_tick=42, since=1_700_000_100.0,
        ),
    )
    return Snapshot(
        node="node-a",
        sample=sample,
        attribution=attribution,
        findings=findings,
        stages=(
            StageStatus("sampling", 0.0125, True),
            StageStatus("attribution", 0.25, False, "kubelet timeout"),
        ),
        xid_counts={(0, H100_UUID, 1, 79): (2, 1_700_000_100.0), (1, A100_UUID, None, 13): (1, 1_699_999_000.5)},
        evictions={("evicted", "interference", "batch"): 3, ("blocked_pdb", "quota", "ml"): 1},
        errors={("attribution", "kubelet_timeout"): 4, ("sampling", "nvml_unknown"): 1},
        mode=Mode.ENFORCE,
        paused=True,
        ready=True,
        policy_reloads={"success": 2},
        mqtt={"published": 12, "dropped": 1, "connect_failures": 2, "connected": 1},
        flight_recorder={"bytes_written": 31_000, "ticks_written": 10, "dropped": 1, "deleted": 0, "segments": 2},
    )


@pytest.fixture
def rich_snapshot() -> Snapshot:
    return build_rich_snapshot()


@pytest.fixture
def rich_snapshot_without_tenant() -> Snapshot:
    return build_rich_snapshot(tenant_label=None)


@pytest.fixture
def snapshot_factory():
    """Build the rich snapshot with some fields replaced; ``tenant_label`` is the label its pod index is built
    with (the one carrier of the tenant rule), not only the snapshot field."""

    def make(**changes) -> Snapshot:
        return dataclasses.replace(build_rich_snapshot(tenant_label=changes.pop("tenant_label", "team")), **changes)

    return make


def _series(snapshot: Snapshot) -> dict[str, list[tuple[dict[str, str], float]]]:
    from watchdog.publishing.build import build_families

    return {
        family.spec.name: [(dict(zip(family.label_names, values)), value) for values, value, _ in family.samples]
        for family in build_families(snapshot)
    }


@pytest.fixture
def series():
    """snapshot → {exposed metric name: [(labels, value), …]} straight from the family builder."""
    return _series
