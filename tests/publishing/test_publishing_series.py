"""Which series a snapshot becomes: names, labels, values, and what is left out."""

from __future__ import annotations

import dataclasses

import pytest

from watchdog.model import Attribution, GpuSample, NodeSample, PodIndex, PodRef, ProcessSample, Snapshot
from watchdog.model.plausibility import CHECKS
from watchdog.publishing import ALL_FAMILIES, build_families

GIB = 1024**3
H100 = "GPU-11111111-aaaa-bbbb-cccc-000000000000"
A100 = "GPU-22222222-aaaa-bbbb-cccc-000000000000"
LOST = "GPU-33333333-aaaa-bbbb-cccc-000000000000"
SPARSE = "GPU-44444444-aaaa-bbbb-cccc-000000000000"
VGPU_HOST = "GPU-55555555-aaaa-bbbb-cccc-000000000000"
MIG_OWNED = "MIG-aaaaaaaa-0000-0000-0000-000000000001"
MIG_SHARED = "MIG-aaaaaaaa-0000-0000-0000-000000000002"
MIG_IDLE = "MIG-aaaaaaaa-0000-0000-0000-000000000003"


def one(rows, **match):
    """The value of the single series whose labels include ``match``."""
    found = [value for labels, value in rows if all(labels.get(k) == v for k, v in match.items())]
    assert len(found) == 1, f"{len(found)} series match {match}"
    return found[0]


def uuids(rows, label="gpu_uuid"):
    return {labels[label] for labels, _ in rows}


def test_every_series_carries_node_and_follows_naming(rich_snapshot, series):
    for name, rows in series(rich_snapshot).items():
        assert name.startswith("gpu_watchdog_")
        for labels, _ in rows:
            assert labels["node"] == "node-a"
            assert all(key == key.lower() for key in labels)
    for spec in ALL_FAMILIES:
        assert spec.help, spec.name
        assert spec.name.endswith("_total") == (spec.kind == "counter"), spec.name
        assert not spec.unit or spec.family_name.endswith("_" + spec.unit), spec.name


def test_gpu_info_and_lost_exist_for_every_gpu(rich_snapshot, series):
    rows = series(rich_snapshot)
    assert one(rows["gpu_watchdog_gpu_info"], gpu_uuid=H100) == 1
    assert one(rows["gpu_watchdog_gpu_info"], gpu_uuid=H100, model="NVIDIA H100 80GB HBM3", mig_mode="enabled") == 1
    assert one(rows["gpu_watchdog_gpu_info"], gpu_uuid=A100, model="NVIDIA A100-SXM4-40GB", mig_mode="disabled") == 1
    assert {labels["mig_mode"] for labels, _ in rows["gpu_watchdog_gpu_info"]} == {"enabled", "disabled"}
    assert one(rows["gpu_watchdog_gpu_lost"], gpu_uuid=LOST) == 1
    assert one(rows["gpu_watchdog_gpu_lost"], gpu_uuid=H100) == 0


def test_lost_gpu_and_none_values_leave_series_out(rich_snapshot, series):
    rows = series(rich_snapshot)
    for name, family_rows in rows.items():
        if name not in ("gpu_watchdog_gpu_info", "gpu_watchdog_gpu_lost") and "gpu_uuid" in family_rows[0][0]:
            assert LOST not in uuids(family_rows), name
    assert uuids(rows["gpu_watchdog_gpu_memory_total_bytes"]) == {H100, A100, SPARSE, VGPU_HOST}
    assert uuids(rows["gpu_watchdog_gpu_power_watts"]) == {H100, A100}  # SPARSE: power unknown → absent, not 0
    assert uuids(rows["gpu_watchdog_gpu_utilization_ratio"]) == {A100}  # not available in MIG mode
    assert uuids(rows["gpu_watchdog_mig_memory_used_bytes"], "mig_uuid") == {MIG_OWNED}
    assert uuids(rows["gpu_watchdog_mig_sm_occupancy_ratio"], "mig_uuid") == {MIG_OWNED}
    assert SPARSE not in uuids(rows["gpu_watchdog_gpu_throttled"])


def test_gpu_values_use_base_units(rich_snapshot, series):
    rows = series(rich_snapshot)
    assert one(rows["gpu_watchdog_gpu_sm_clock_hertz"], gpu_uuid=H100) == pytest.approx(1.755e9)
    assert one(rows["gpu_watchdog_gpu_sm_clock_max_hertz"], gpu_uuid=A100) == pytest.approx(1.41e9)
    assert one(rows["gpu_watchdog_gpu_memory_total_bytes"], gpu_uuid=H100) == 80 * GIB
    assert one(rows["gpu_watchdog_gpu_power_watts"], gpu_uuid=H100) == 412.5
    assert one(rows["gpu_watchdog_gpu_temperature_celsius"], gpu_uuid=A100) == 55.0
    assert one(rows["gpu_watchdog_gpu_pcie_rx_bytes_per_second"], gpu_uuid=H100) == 2.25e9
    assert one(rows["gpu_watchdog_gpu_dram_bandwidth_utilization_ratio"], gpu_uuid=A100) == 0.35
    assert one(rows["gpu_watchdog_gpu_processes"], gpu_uuid=H100) == 4  # MIG processes included
    assert one(rows["gpu_watchdog_gpu_processes"], gpu_uuid=A100) == 4


def test_throttle_reasons_split_the_mask(rich_snapshot, series):
    rows = series(rich_snapshot)
    assert one(rows["gpu_watchdog_gpu_clock_event_reasons"], gpu_uuid=A100) == 0x24
    rows_a100 = [(labels, value) for labels, value in rows["gpu_watchdog_gpu_throttled"] if labels["gpu"] == "1"]
    throttled = {labels["reason"]: value for labels, value in rows_a100}
    assert throttled["sw_power_cap"] == 1 and throttled["sw_thermal_slowdown"] == 1
    assert sum(throttled.values()) == 2 and len(throttled) == 9
    assert all(value == 0 for labels, value in rows["gpu_watchdog_gpu_throttled"] if labels["gpu"] == "0")


def test_mig_series_name_the_single_owner_and_tenant(rich_snapshot, series):
    rows = series(rich_snapshot)["gpu_watchdog_mig_memory_total_bytes"]
    owned = next(labels for labels, _ in rows if labels["mig_uuid"] == MIG_OWNED)
    assert owned == {
        "node": "node-a", "gpu": "0", "gpu_uuid": H100, "mig_uuid": MIG_OWNED, "gpu_instance": "1",
        "compute_instance": "0", "profile": "3g.40gb", "namespace": "ml", "pod": "train-a",
        "container": "trainer", "tenant": "research",
    }
    shared = next(labels for labels, _ in rows if labels["mig_uuid"] == MIG_SHARED)
    assert (shared["namespace"], shared["pod"], shared["container"], shared["tenant"]) == ("", "", "", "")
    assert one(series(rich_snapshot)["gpu_watchdog_mig_processes"], mig_uuid=MIG_SHARED) == 3
    assert one(series(rich_snapshot)["gpu_watchdog_mig_processes"], mig_uuid=MIG_IDLE) == 0


def test_one_pod_with_several_containers_on_an_instance_is_one_owner(snapshot_factory, series):
    base = snapshot_factory()
    devices = dict(base.attribution.devices)
    devices[MIG_OWNED] = (PodRef("ml", "train-a", "uid-train", "a"), PodRef("ml", "train-a", "uid-train", "b"))
    snapshot = dataclasses.replace(base, attribution=dataclasses.replace(base.attribution, devices=devices))
    rows = series(snapshot)["gpu_watchdog_mig_memory_total_bytes"]
    owned = next(labels for labels, _ in rows if labels["mig_uuid"] == MIG_OWNED)
    assert (owned["pod"], owned["container"]) == ("train-a", "")


def test_time_sliced_pods_get_their_own_values_not_the_device_copy(rich_snapshot, series):
    rows = series(rich_snapshot)
    memory = rows["gpu_watchdog_pod_gpu_memory_used_bytes"]
    assert one(memory, gpu_uuid=A100, pod="ts-1", container="a", tenant="research") == 5 * GIB  # pids 300 + 301
    assert one(memory, gpu_uuid=A100, pod="ts-2", tenant="batch") == 4 * GIB  # tenant found without uid
    assert one(memory, gpu_uuid=A100, pod="", namespace="") == GIB  # the process no pod owns
    assert one(memory, mig_uuid=MIG_SHARED, pod="inf-c") == 3 * GIB
    assert one(memory, mig_uuid=MIG_OWNED, pod="train-a") == 10 * GIB
    sm = rows["gpu_watchdog_pod_sm_utilization_ratio"]
    assert one(sm, pod="ts-1") == pytest.approx(0.375)
    assert one(sm, pod="ts-2") == pytest.approx(0.2)
    assert uuids(sm, "pod") == {"ts-1", "ts-2"}  # no utilization known for the rest → absent
    mem_util = rows["gpu_watchdog_pod_memory_utilization_ratio"]
    assert one(mem_util, pod="ts-1") == pytest.approx(0.125)  # pid 301 unknown: the known part only
    assert {labels["mig_uuid"] for labels, _ in memory if labels["gpu_uuid"] == A100} == {""}


def test_pod_info_carries_priority_once(rich_snapshot, series):
    rows = series(rich_snapshot)
    info = rows["gpu_watchdog_pod_info"]
    assert len(info) == 5
    assert one(info, pod="inf-c") == 1
    labels = next(labels for labels, _ in info if labels["pod"] == "inf-c")
    assert labels == {
        "node": "node-a", "namespace": "web", "pod": "inf-c", "uid": "uid-inf-c", "priority_class": "prio-2000",
        "qos_class": "Burstable", "priority": "2000", "tenant": "product",
    }
    for name, family_rows in rows.items():
        if name != "gpu_watchdog_pod_info":
            assert "priority" not in family_rows[0][0], name


def test_no_tenant_label_unless_configured(rich_snapshot_without_tenant, series):
    for name, rows in series(rich_snapshot_without_tenant).items():
        assert all("tenant" not in labels for labels, _ in rows), name


def test_xids_are_counters_with_last_seen(rich_snapshot, series):
    rows = series(rich_snapshot)
    assert one(rows["gpu_watchdog_xid_errors_total"], xid="79", gpu_instance="1", gpu_uuid=H100) == 2
    assert one(rows["gpu_watchdog_xid_errors_total"], xid="13", gpu_instance="") == 1
    assert one(rows["gpu_watchdog_xid_last_seen_timestamp_seconds"], xid="13") == 1_699_999_000.5


def test_findings_count_once_per_victim(rich_snapshot, series):
    rows = series(rich_snapshot)["gpu_watchdog_findings"]
    assert one(rows, kind="interference", victim_pod="ts-1", culprit_pod="ts-2", resource="dram") == 1
    assert one(rows, kind="interference", victim_namespace="web", victim_pod="inf-c", severity="warning") == 1
    assert one(rows, kind="unauthorized", victim_pod="", culprit_pod="", severity="critical") == 1
    doubled = dataclasses.replace(rich_snapshot, findings=rich_snapshot.findings * 2)
    assert one(series(doubled)["gpu_watchdog_findings"], kind="unauthorized") == 2


def test_agent_series(rich_snapshot, series):
    rows = series(rich_snapshot)
    assert one(rows["gpu_watchdog_evictions_total"], result="evicted", reason="interference", namespace="batch") == 3
    assert one(rows["gpu_watchdog_errors_total"], stage="attribution", error="kubelet_timeout") == 4
    assert one(rows["gpu_watchdog_stage_duration_seconds"], stage="sampling") == 0.0125
    assert one(rows["gpu_watchdog_stage_success"], stage="attribution") == 0
    assert {labels["mode"]: value for labels, value in rows["gpu_watchdog_mode"]} == {
        "observe": 0, "dry-run": 0, "enforce": 1,
    }
    assert one(rows["gpu_watchdog_evictions_paused"]) == 1
    assert one(rows["gpu_watchdog_ready"]) == 1
    assert one(rows["gpu_watchdog_policy_reloads_total"], result="success") == 2
    assert one(rows["gpu_watchdog_policy_reloads_total"], result="failure") == 0
    assert one(rows["gpu_watchdog_build_info"], driver_version="570.86.15", version="0.1.0") == 1
    assert one(rows["gpu_watchdog_attribution_source_up"], source="kubelet") == 1
    assert one(rows["gpu_watchdog_last_sample_timestamp_seconds"]) == 1_700_000_123.25


def test_without_attribution_processes_are_unowned(snapshot_factory, series):
    rows = series(snapshot_factory(attribution=None))
    assert "gpu_watchdog_pod_info" not in rows and "gpu_watchdog_attribution_healthy" not in rows
    memory = rows["gpu_watchdog_pod_gpu_memory_used_bytes"]
    assert one(memory, gpu_uuid=A100) == 10 * GIB  # all four processes, one unowned group
    assert {labels["pod"] for labels, _ in rows["gpu_watchdog_mig_processes"]} == {""}


def test_empty_snapshot_has_only_agent_series(series):
    rows = series(Snapshot(node="n"))
    assert set(rows) == {
        "gpu_watchdog_build_info", "gpu_watchdog_mode", "gpu_watchdog_evictions_paused", "gpu_watchdog_ready",
        "gpu_watchdog_policy_reloads_total", "gpu_watchdog_kill_switch_known", "gpu_watchdog_readings_rejected_total",
    }
    assert {labels["check"]: value for labels, value in rows["gpu_watchdog_readings_rejected_total"]} == dict.fromkeys(
        CHECKS, 0)
    assert one(rows["gpu_watchdog_build_info"], driver_version="") == 1
    assert one(rows["gpu_watchdog_kill_switch_known"]) == 1
    assert one(series(Snapshot(node="n", kill_switch_known=False))["gpu_watchdog_kill_switch_known"]) == 0


def test_unhealthy_attribution_is_exported(snapshot_factory, series):
    rows = series(snapshot_factory(attribution=Attribution(healthy=False, kubelet_ok=False)))
    assert one(rows["gpu_watchdog_attribution_healthy"]) == 0
    assert one(rows["gpu_watchdog_attribution_source_up"], source="kubelet") == 0
    assert one(rows["gpu_watchdog_attribution_source_up"], source="api") == 1


def test_pod_series_are_the_attributions_usage_the_sums_detection_reads(rich_snapshot, series):
    """One sum per (device, pod, container), made once: the published series and detection's per-pod numbers are
    the same figures."""
    from watchdog.detection import devices_of

    sample, attribution = rich_snapshot.sample, rich_snapshot.attribution
    usage = attribution.usage(sample)
    memory = series(rich_snapshot)["gpu_watchdog_pod_gpu_memory_used_bytes"]
    assert attribution.usage(sample) is usage  # the render read the sums, it did not make its own
    published = {(labels["gpu_uuid"], labels["mig_uuid"], labels["pod"], labels["container"]): value
                 for labels, value in memory}
    expected = {}
    for gpu in sample.gpus:
        for uuid, mig_uuid in [(gpu.uuid, "")] + [(mig.uuid, mig.uuid) for mig in gpu.instances]:
            for user in usage.get(uuid, ()):
                if user.memory_bytes is not None:
                    ref = user.ref
                    key = (gpu.uuid, mig_uuid, ref.name if ref else "", (ref.container or "") if ref else "")
                    expected[key] = user.memory_bytes
    assert published == expected
    for device in devices_of(sample, attribution):
        for pod_key, used in device.pod_memory.items():
            name = pod_key.split("/", 1)[1]
            mig_uuid = device.uuid if device.mig else ""
            assert used == sum(v for (g, m, p, _), v in published.items() if (m, p) == (mig_uuid, name)
                               and g == device.gpu.uuid)


def test_non_mig_gpu_without_processes_has_no_pod_series(series):
    gpu = GpuSample(index=0, uuid="GPU-x", name="L4", processes=(ProcessSample(1, None),))
    snapshot = Snapshot(node="n", sample=NodeSample(node="n", tick=1, timestamp=1.0, gpus=(gpu,)))
    rows = series(snapshot)
    assert "gpu_watchdog_pod_gpu_memory_used_bytes" not in rows
    assert one(rows["gpu_watchdog_gpu_processes"]) == 1


def test_processes_are_counted_by_the_nvml_lists_that_reported_them(series):
    """An MPS GPU: the server (compute list), two clients (MPS list), one PID both lists reported."""
    processes = (ProcessSample(900, 1 << 25), ProcessSample(101, GIB, mode="mps"), ProcessSample(102, GIB, mode="mps"),
                 ProcessSample(103, GIB, mode="compute+mps"))
    gpu = GpuSample(index=0, uuid="GPU-m", name="H100", processes=processes)
    rows = series(Snapshot(node="n", sample=NodeSample(node="n", tick=1, timestamp=1.0, gpus=(gpu,))))
    by_mode = {labels["mode"]: value for labels, value in rows["gpu_watchdog_gpu_processes_by_mode"]}
    assert by_mode == {"compute": 1, "mps": 2, "compute+mps": 1}
    assert one(rows["gpu_watchdog_gpu_processes"]) == 4


def test_bad_input_is_refused():
    with pytest.raises(TypeError, match="Snapshot"):
        build_families({"node": "n"})


def test_a_pod_without_the_tenant_label_is_its_namespaces_tenant(rich_snapshot):
    """Metrics name tenants as detection and action count them: the label's value, else the namespace."""
    import dataclasses
    from types import MappingProxyType

    from watchdog.publishing import render

    pods = dict(rich_snapshot.attribution.pods)
    pods["uid-ts-2"] = dataclasses.replace(pods["uid-ts-2"], labels=MappingProxyType({}))
    index = PodIndex(pods, tenant_label="team")
    snapshot = dataclasses.replace(rich_snapshot, attribution=dataclasses.replace(rich_snapshot.attribution, index=index))
    lines = [line for line in render(snapshot).decode().splitlines() if 'pod="ts-2"' in line and "tenant=" in line]
    assert lines and all('tenant="batch"' in line for line in lines)


def test_vgpu_series_exist_on_the_vgpu_host_only(rich_snapshot, series):
    rows = series(rich_snapshot)
    vgpu_families = [name for name in rows if name.startswith("gpu_watchdog_vgpu_")]
    assert len(vgpu_families) == 6
    for name in vgpu_families:
        assert uuids(rows[name]) == {VGPU_HOST}, name
        (labels, _), = rows[name]
        assert labels["vgpu_type"] == "GRID A100-10C" and labels["vm_id"] and labels["vgpu_uuid"]
    (labels, value), = rows["gpu_watchdog_vgpu_framebuffer_used_bytes"]
    assert value == 6 * 1024**3
    (labels, value), = rows["gpu_watchdog_gpu_vgpu_scheduler_info"]
    assert (labels["gpu_uuid"], labels["policy"], value) == (VGPU_HOST, "equal_share", 1)


def test_a_vgpu_host_whose_scheduler_was_not_named_says_unknown(rich_snapshot, series):
    import dataclasses

    sample = rich_snapshot.sample
    gpus = tuple(dataclasses.replace(g, vgpu_scheduler=None) if g.uuid == VGPU_HOST else g for g in sample.gpus)
    snapshot = dataclasses.replace(rich_snapshot, sample=dataclasses.replace(sample, gpus=gpus))
    (labels, value), = series(snapshot)["gpu_watchdog_gpu_vgpu_scheduler_info"]
    assert (labels["gpu_uuid"], labels["policy"], value) == (VGPU_HOST, "unknown", 1)
