"""How long one /metrics scrape takes to render, and how big it is, on a full MIG node.

The budget is 5 ms per scrape at 56 MIG instances (8 H100 × 7 × 1g.10gb) with every instance attributed to a
pod: a scrape must stay negligible next to the agent's 1 s cycle even when several Prometheus servers scrape.
Measures our renderer (text 0.0.4 and OpenMetrics 1.0.0, cold: a new snapshot each time) against
prometheus_client's own generate_latest over the same collector, at 56 and 112 instances.

    .venv/bin/python bench/bench_exporter.py [--rounds 200]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import generate_latest  # noqa: E402
from prometheus_client.openmetrics.exposition import generate_latest as generate_latest_openmetrics  # noqa: E402

from watchdog.model import (  # noqa: E402
    Attribution, Finding, FindingKind, GpuSample, MigSample, Mode, NodeSample, PodIndex, PodInfo, PodRef, ProcessSample,
    Severity, Snapshot, StageStatus,
)
from watchdog.publishing import Exposition, build_registry, render  # noqa: E402

GIB = 1024**3
INSTANCES_PER_GPU = 7


def mig_node_snapshot(*, gpus: int, tick: int = 1) -> Snapshot:
    """A node of ``gpus`` H100s, each split into 7 MIG instances, every instance owned by one pod."""
    gpu_samples, devices, processes, pods = [], {}, {}, {}
    pid = 1000
    for index in range(gpus):
        instances = []
        for slot in range(INSTANCES_PER_GPU):
            mig_uuid = f"MIG-{index:04d}{slot:04d}-0000-4000-8000-{tick:012d}"
            pod = PodInfo(
                uid=f"uid-{index}-{slot}", namespace=f"team-{slot % 3}", name=f"job-{index}-{slot}",
                labels={"tenant": f"tenant-{slot % 3}"}, priority=100 * slot, priority_class="batch",
                qos_class="Guaranteed",
            )
            ref = PodRef(pod.namespace, pod.name, pod.uid, "main")
            pods[pod.uid], devices[mig_uuid] = pod, (ref,)
            procs = []
            for _ in range(2):
                pid += 1
                processes[pid] = ref
                procs.append(ProcessSample(pid, 2 * GIB + pid, gpu_instance=slot + 7, compute_instance=0))
            instances.append(MigSample(
                uuid=mig_uuid, gpu_index=index, gpu_instance=slot + 7, compute_instance=0, profile="1g.10gb",
                memory_total_bytes=10 * GIB, memory_used_bytes=4 * GIB + slot, memory_reserved_bytes=GIB // 8,
                dram_bw_util=0.1 * slot + 0.01, sm_util=0.33 + slot / 100, sm_occupancy=0.21,
                processes=tuple(procs),
            ))
        gpu_samples.append(GpuSample(
            index=index, uuid=f"GPU-{index:08d}-0000-4000-8000-000000000000", name="NVIDIA H100 80GB HBM3",
            mig_enabled=True, memory_total_bytes=80 * GIB, memory_used_bytes=29 * GIB, memory_reserved_bytes=GIB,
            power_watts=402.25 + index, power_limit_watts=700.0, temperature_celsius=60.0 + index,
            sm_clock_mhz=1755.0, sm_clock_max_mhz=1980.0, clock_event_reasons=0x4,
            pcie_tx_bytes_per_second=1.25e9, pcie_rx_bytes_per_second=2.5e9, instances=tuple(instances),
        ))
    finding = Finding(
        kind=FindingKind.INTERFERENCE, key="interference/0", domain="gpu/GPU-0/power", resource="power",
        severity=Severity.WARNING, first_tick=1, last_tick=tick, since=0.0,
        victims=(PodRef("team-0", "job-0-0"),), culprit=PodRef("team-1", "job-0-1"),
    )
    return Snapshot(
        node="node-bench",
        sample=NodeSample(node="node-bench", tick=tick, timestamp=1.7e9 + tick, gpus=tuple(gpu_samples),
                          driver_version="570.86.15"),
        attribution=Attribution(devices=devices, processes=processes, index=PodIndex(pods, tenant_label="tenant")),
        findings=(finding,),
        stages=tuple(StageStatus(name, 0.001, True) for name in ("sampling", "attribution", "detection", "action")),
        xid_counts={(0, gpu_samples[0].uuid, 7, 79): (1, 1.7e9)},
        evictions={("evicted", "interference", "team-1"): 2},
        mode=Mode.ENFORCE, ready=True,
    )


def _time(function, rounds: int) -> tuple[float, float]:
    """(mean, p99) in milliseconds."""
    function()  # warm-up
    gc.collect()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        function()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.fmean(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200, help="timed renders per row")
    args = parser.parse_args()
    print(f"{'instances':>9} {'renderer':<28} {'mean ms':>8} {'p99 ms':>8} {'bytes':>8}")
    for gpus in (8, 16):
        snapshot = mig_node_snapshot(gpus=gpus)
        registry = build_registry(lambda: snapshot)
        exposition = Exposition(lambda: snapshot)

        def gzip_cold(snapshot=snapshot):
            # a fresh cache each call: render + compress, what the first gzip scrape of a cycle pays
            return Exposition(lambda: snapshot).body(snapshot=snapshot, openmetrics=True, gzipped=True)

        def cached(snapshot=snapshot):
            return exposition.body(snapshot=snapshot, openmetrics=True, gzipped=False)

        rows = (
            ("watchdog text 0.0.4", lambda: render(snapshot, False)),
            ("watchdog openmetrics 1.0.0", lambda: render(snapshot, True)),
            ("watchdog openmetrics+gzip", gzip_cold),
            ("watchdog cached (same snap)", cached),
            ("client_python text", lambda: generate_latest(registry)),
            ("client_python openmetrics", lambda: generate_latest_openmetrics(registry)),
        )
        for label, function in rows:
            mean, p99 = _time(function, args.rounds)
            print(f"{gpus * INSTANCES_PER_GPU:>9} {label:<28} {mean:>8.2f} {p99:>8.2f} {len(function()):>8}")


if __name__ == "__main__":
    main()
