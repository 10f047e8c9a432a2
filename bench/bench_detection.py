"""Detection CPU per tick on a dense node: 8 H100s split into 56 MIG 1g instances plus two time-sliced GPUs.

Why: detection runs inline in every cycle of a per-node agent, and dcgm-exporter's users measured up to 10 cores
on H200 MIG nodes (dcgm-exporter#599). Target: ≤ 1 ms mean per tick. The scenario keeps
findings open (a power-capped GPU with an antagonist, memory pressure and unauthorized use on the time-sliced GPU,
a quota breach, recurring Xids) so the slow paths are measured, not only the quiet ones. The second time-sliced GPU
runs three contexts whose shares sum to 0.9 while utilization.gpu reads 100 %, with a neighbour ramping up and
down, so the scheduler model weighs contended ticks all along.

Run: .venv/bin/python bench/bench_detection.py [--ticks N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from watchdog.config.detection import DetectionPolicy
from watchdog.detection import Detector
from watchdog.model import Attribution, GpuSample, MigSample, NodeSample, PodIndex, PodInfo, ProcessSample, XidEvent

GIB = 1 << 30
GPUS, SLICES, ONSET = 8, 7, 200


def build_pods() -> tuple[dict[str, PodInfo], dict[str, tuple], dict[int, object]]:
    pods: dict[str, PodInfo] = {}
    devices: dict[str, tuple] = {}
    processes: dict[int, object] = {}
    for g in range(GPUS):
        for s in range(SLICES):
            info = PodInfo(uid=f"u{g}-{s}", namespace=f"tenant-{s % 4}", name=f"job-{g}-{s}", priority=s)
            pods[info.uid] = info
            devices[f"MIG-{g}-{s}"] = (info.ref,)
            processes[1000 + g * 10 + s] = info.ref
    for i in range(3):
        info = PodInfo(uid=f"ts{i}", namespace=f"tenant-{i}", name=f"ts-{i}", priority=i)
        pods[info.uid] = info
        processes[5000 + i] = info.ref
    devices["GPU-ts"] = tuple(pods[f"ts{i}"].ref for i in range(2))  # ts-2 runs there without an assignment
    for i in range(3):
        info = PodInfo(uid=f"ramp{i}", namespace=f"tenant-{i + 1}", name=f"ramp-{i}", priority=i)
        pods[info.uid] = info
        processes[6000 + i] = info.ref
    devices["GPU-ts2"] = tuple(pods[f"ramp{i}"].ref for i in range(3))
    return pods, devices, processes


def build_sample(tick: int, rng: np.random.Generator) -> NodeSample:
    gpus = []
    for g in range(GPUS):
        capped = g == 0 and tick >= ONSET
        instances = []
        for s in range(SLICES):
            busy = 1.0 if (capped and s == 1) else (0.05 if g == 0 and s == 1 else 0.7)
            used = int((2 + s * 0.5) * GIB)
            instances.append(
                MigSample(
                    uuid=f"MIG-{g}-{s}", gpu_index=g, gpu_instance=s + 7, compute_instance=0, profile="1g.10gb",
                    memory_total_bytes=10 * GIB, memory_used_bytes=used, memory_reserved_bytes=0,
                    sm_util=float(np.clip(busy + rng.normal(0, 0.02), 0, 1)), dram_bw_util=0.3,
                    pcie_tx_bytes_per_second=1e9, pcie_rx_bytes_per_second=float(2e9 + rng.normal(0, 1e8)),
                    processes=(ProcessSample(1000 + g * 10 + s, used, s + 7, 0),),
                )
            )
        gpus.append(
            GpuSample(
                index=g, uuid=f"GPU-{g}", name="NVIDIA H100 80GB HBM3", mig_enabled=True,
                sm_clock_mhz=1980 * (0.75 if capped else 1.0), sm_clock_max_mhz=1980,
                clock_event_reasons=0x4 if capped else 0, instances=tuple(instances),
                pcie_link_bytes_per_second=63e9,  # Gen5 x16: every MIG GPU is a PCIe domain too
            )
        )
    grow = min(tick, 300) * 0.25 * GIB
    ts_procs = tuple(
        ProcessSample(5000 + i, int(20 * GIB + (grow if i == 1 else 0)), sm_util=0.3, memory_util=0.3)
        for i in range(3)
    )
    used = sum(p.used_memory_bytes for p in ts_procs)
    gpus.append(
        GpuSample(
            index=GPUS, uuid="GPU-ts", name="NVIDIA H100 80GB HBM3", memory_total_bytes=80 * GIB,
            memory_used_bytes=min(used, 80 * GIB), memory_reserved_bytes=0, gpu_util=0.9, sm_clock_mhz=1980,
            sm_clock_max_mhz=1980, clock_event_reasons=0, processes=ts_procs,
        )
    )
    # Three contexts losing 0.1 to switching; ramp-2 ramps up over 100 ticks and back down, again and again.
    phase = (tick % 200) / 100.0
    ramp = 0.1 + 0.5 * (phase if phase <= 1.0 else 2.0 - phase)
    shares = [0.25, 0.15, ramp]
    scale = min(1.0, 0.9 / sum(shares))
    ramp_procs = tuple(
        ProcessSample(6000 + i, 4 * GIB, sm_util=float(np.clip(share * scale + rng.normal(0, 0.01), 0, 1)),
                      memory_util=0.2)
        for i, share in enumerate(shares)
    )
    gpus.append(
        GpuSample(
            index=GPUS + 1, uuid="GPU-ts2", name="NVIDIA H100 80GB HBM3", memory_total_bytes=80 * GIB,
            memory_used_bytes=12 * GIB, memory_reserved_bytes=0,
            gpu_util=min(1.0, sum(shares) / 0.9), sm_clock_mhz=1980, sm_clock_max_mhz=1980, clock_event_reasons=0,
            processes=ramp_procs,
        )
    )
    xids = (XidEvent(3, "GPU-3", 13, 0x8, float(tick), gpu_instance=9, compute_instance=0),) if tick % 50 == 0 else ()
    return NodeSample(node="bench", tick=tick, timestamp=float(tick), gpus=tuple(gpus), xids=xids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=2000)
    args = parser.parse_args()
    pods, devices, processes = build_pods()
    attribution = Attribution(devices=devices, processes=processes, index=PodIndex(pods))  # type: ignore[arg-type]
    policy = DetectionPolicy.model_validate({"quota": {"tenants": {"tenant-1": {"gpu_memory_bytes": 40 * GIB}}}})
    detector = Detector(policy)
    rng = np.random.default_rng(1)
    samples = [build_sample(t, rng) for t in range(args.ticks)]
    durations, kinds = [], {}
    for s in samples:
        start = time.perf_counter()
        findings = detector.step(s, attribution)
        durations.append(time.perf_counter() - start)
        for finding in findings:
            kinds[finding.kind.value] = kinds.get(finding.kind.value, 0) + 1
    ms = np.array(durations[50:]) * 1e3  # skip warm-up
    print(f"ticks={args.ticks} devices={GPUS * SLICES}+2 findings(per kind, summed over ticks)={kinds}")
    print(f"detection per tick: mean={ms.mean():.3f} ms p99={np.percentile(ms, 99):.3f} ms max={ms.max():.3f} ms")


if __name__ == "__main__":
    main()
