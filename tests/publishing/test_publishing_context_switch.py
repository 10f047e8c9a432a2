"""Context switching (GPM GR0_CTXSW_*) per whole GPU and per GPU instance: a series where the sampler read a value,
none where it could not (MIG parent, an older driver, a lost GPU), with the labels of the other GPM series."""

from __future__ import annotations

import dataclasses

from watchdog.model import Attribution, GpuSample, MigSample, NodeSample, PodIndex, PodInfo, Snapshot
from watchdog.publishing import render

GIB = 1024**3
H100 = "GPU-11111111-aaaa-bbbb-cccc-000000000000"
A100 = "GPU-22222222-aaaa-bbbb-cccc-000000000000"
MIG_OWNED = "MIG-aaaaaaaa-0000-0000-0000-000000000001"
GPU_ACTIVE = "gpu_watchdog_gpu_context_switch_active_ratio"
GPU_RATE = "gpu_watchdog_gpu_context_switches_per_second"
MIG_ACTIVE = "gpu_watchdog_mig_context_switch_active_ratio"
MIG_RATE = "gpu_watchdog_mig_context_switches_per_second"


def test_a_whole_gpu_has_both_series_with_the_gpu_labels_and_the_others_none(rich_snapshot, series):
    rows = series(rich_snapshot)
    for name, value in ((GPU_ACTIVE, 0.0625), (GPU_RATE, 1500.0)):
        assert rows[name] == [({"node": "node-a", "gpu": "1", "gpu_uuid": A100}, value)]
    # The MIG GPU (no whole-GPU reading in MIG mode), the lost GPU and the GPU whose driver gave none: absent.


def test_a_gpu_instance_has_both_series_with_the_mig_and_owner_labels(rich_snapshot, series):
    rows = series(rich_snapshot)
    for name in (MIG_ACTIVE, MIG_RATE):
        [(labels, value)] = rows[name]  # the instances without a reading are left out, not written as 0
        assert value == 0.0
        assert labels == {"node": "node-a", "gpu": "0", "gpu_uuid": H100, "mig_uuid": MIG_OWNED, "gpu_instance": "1",
                          "compute_instance": "0", "profile": "3g.40gb", "namespace": "ml", "pod": "train-a",
                          "container": "trainer", "tenant": "research"}


def test_without_readings_there_are_no_series(snapshot_factory, series):
    rich = snapshot_factory()
    gpus = tuple(dataclasses.replace(
        gpu, ctxsw_active=None, ctxsw_per_second=None,
        instances=tuple(dataclasses.replace(mig, ctxsw_active=None, ctxsw_per_second=None) for mig in gpu.instances),
    ) for gpu in rich.sample.gpus)
    rows = series(dataclasses.replace(rich, sample=dataclasses.replace(rich.sample, gpus=gpus)))
    assert not any(rows.get(name) for name in (GPU_ACTIVE, GPU_RATE, MIG_ACTIVE, MIG_RATE))


def test_a_split_gpu_instances_switching_names_no_single_pod(series):
    a, b = (PodInfo(uid=f"u-{n}", namespace=n, name="p", priority=0) for n in ("ta", "tb"))
    cis = tuple(MigSample(f"MIG-c{ci}", 0, 1, ci, "2c.4g.40gb", 40 * GIB, 16 * GIB, 0, sm_util=0.5,
                          ctxsw_active=0.02, ctxsw_per_second=800.0) for ci in (0, 1))
    gpu = GpuSample(index=0, uuid="GPU-h", name="NVIDIA H100 80GB HBM3", mig_enabled=True, instances=cis)
    attribution = Attribution(devices={"MIG-c0": (a.ref,), "MIG-c1": (b.ref,)}, index=PodIndex({a.uid: a, b.uid: b}))
    rows = series(Snapshot(node="node-a", sample=NodeSample(node="node-a", tick=1, timestamp=1.0, gpus=(gpu,)),
                           attribution=attribution))
    for name, value in ((MIG_ACTIVE, 0.02), (MIG_RATE, 800.0)):
        assert sorted((labels["mig_uuid"], labels["namespace"], v) for labels, v in rows[name]) == [
            ("MIG-c0", "", value), ("MIG-c1", "", value)]


def test_the_exposition_declares_both_families_with_their_units(rich_snapshot):
    text = render(rich_snapshot, True).decode()  # OpenMetrics: with # UNIT lines
    for name, unit in ((GPU_ACTIVE, "ratio"), (GPU_RATE, "per_second"), (MIG_ACTIVE, "ratio"),
                       (MIG_RATE, "per_second")):
        assert f"# TYPE {name} gauge\n" in text and f"# UNIT {name} {unit}\n" in text
    assert f'{GPU_RATE}{{gpu="1",gpu_uuid="{A100}",node="node-a"}} 1500.0\n' in text
