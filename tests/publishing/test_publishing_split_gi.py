"""Series of a GPU instance split into compute instances held by two tenants: each CI handle reports the GI's
memory, which is neither pod's own, so the GI-level MIG series carry no pod labels, the per-CI SM series keep their
pod, and each pod's memory series is its own process's bytes, counted once."""

from __future__ import annotations

from watchdog.model import Attribution, GpuSample, MigSample, NodeSample, PodIndex, PodInfo, ProcessSample, Snapshot

GIB = 1024**3


def test_a_split_gpu_instances_memory_names_no_single_pod(series):
    a, b = (PodInfo(uid=f"u-{n}", namespace=n, name="p", priority=0) for n in ("ta", "tb"))
    cis = tuple(MigSample(f"MIG-c{ci}", 0, 1, ci, "2c.4g.40gb", 40 * GIB, 16 * GIB, 0, dram_bw_util=0.9,
                          sm_util=0.5, processes=(ProcessSample(100 + ci, (10 - 4 * ci) * GIB, 1, ci),))
                for ci in (0, 1))
    gpu = GpuSample(index=0, uuid="GPU-h", name="NVIDIA H100 80GB HBM3", mig_enabled=True, instances=cis)
    attribution = Attribution(devices={"MIG-c0": (a.ref,), "MIG-c1": (b.ref,)}, processes={100: a.ref, 101: b.ref},
                              index=PodIndex({a.uid: a, b.uid: b}))
    rows = series(Snapshot(node="node-a", sample=NodeSample(node="node-a", tick=1, timestamp=1.0, gpus=(gpu,)),
                           attribution=attribution))
    used = rows["gpu_watchdog_mig_memory_used_bytes"]
    assert sorted((labels["mig_uuid"], labels["namespace"], value) for labels, value in used) == [
        ("MIG-c0", "", 16 * GIB), ("MIG-c1", "", 16 * GIB)]
    sm = rows["gpu_watchdog_mig_sm_utilization_ratio"]
    assert sorted((labels["mig_uuid"], labels["namespace"]) for labels, _ in sm) == [("MIG-c0", "ta"), ("MIG-c1", "tb")]
    pods = rows["gpu_watchdog_pod_gpu_memory_used_bytes"]
    assert sorted((labels["namespace"], value) for labels, value in pods) == [("ta", 10 * GIB), ("tb", 6 * GIB)]
