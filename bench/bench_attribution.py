"""What attribution costs per tick on a full MIG node, and what the pod cache weighs.

dcgm-exporter's pod mapping on the scrape path costs up to 10 cores on H200 MIG nodes (dcgm-exporter issue #599).
Ours runs once per 1 s cycle: read /proc/<pid>/cgroup for the PIDs NVML reports (cached by PID) and join with the
kubelet's assignments and the pod cache. Budget: well under 1 ms warm at 56 MIG instances (8 GPUs × 7) and 200 pods,
so attribution is noise next to sampling. Measures the /proc reads against a fixture tree in a temp dir (cold: a new
reader each tick; warm: PIDs already cached), the pure join, and the pod cache's memory (tracemalloc).

    .venv/bin/python bench/bench_attribution.py [--rounds 500]
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from types import MappingProxyType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from watchdog.attribution.proc import ProcReader  # noqa: E402
from watchdog.attribution.join import attribute, unknown_devices  # noqa: E402
from watchdog.attribution.pods import PodCache  # noqa: E402
from watchdog.model import (  # noqa: E402
    ContainerInfo, DeviceAssignment, GpuSample, MigSample, NodeSample, PodInfo, ProcessSample,
)

GPUS, INSTANCES_PER_GPU, PODS, PROCESSES_PER_INSTANCE = 8, 7, 200, 2


def make_pods(count: int) -> list[PodInfo]:
    pods = []
    for n in range(count):
        uid = f"{n:08x}-0000-4000-8000-{n:012x}"
        pods.append(
            PodInfo(
                uid=uid, namespace=f"team-{n % 12}", name=f"job-{n}-abcde", node="gpu-node-1",
                labels=MappingProxyType({"app": f"job-{n}", "tenant": f"t{n % 5}", "pod-template-hash": "7d9f8c6b5"}),
                annotations=MappingProxyType({"kubectl.kubernetes.io/default-container": "main"}),
                priority=1000 * (n % 3), priority_class="batch", qos_class="Burstable", owner_kind="ReplicaSet",
                created=1.7e9 + n,
                containers=(ContainerInfo("main", f"{n:064x}"), ContainerInfo("sidecar", f"{n + 10**6:064x}")),
            )
        )
    return pods


def make_node(pods: list[PodInfo], proc_root: Path):
    """56 MIG instances, each given to one of the first 56 pods, two processes each; cgroup files written."""
    gpus, assignments, pid = [], [], 1000
    for gpu in range(GPUS):
        instances = []
        for slot in range(INSTANCES_PER_GPU):
            pod = pods[gpu * INSTANCES_PER_GPU + slot]
            uuid = f"MIG-{gpu:02d}{slot:02d}0000-1111-2222-3333-444455556666"
            processes = []
            for _ in range(PROCESSES_PER_INSTANCE):
                pid += 1
                (proc_root / str(pid)).mkdir()
                underscored = pod.uid.replace("-", "_")
                (proc_root / str(pid) / "cgroup").write_text(
                    f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{underscored}.slice/"
                    f"cri-containerd-{pod.containers[0].container_id}.scope\n"
                )
                processes.append(ProcessSample(pid=pid, used_memory_bytes=2 << 30, gpu_instance=slot + 1))
            instances.append(MigSample(uuid=uuid, gpu_index=gpu, gpu_instance=slot + 1, compute_instance=0,
                                       profile="1g.18gb", processes=tuple(processes)))
            assignments.append(DeviceAssignment(uuid, "nvidia.com/mig-1g.18gb", pod.namespace, pod.name, "main"))
        gpus.append(GpuSample(index=gpu, uuid=f"GPU-{gpu}", name="NVIDIA H200", mig_enabled=True,
                              instances=tuple(instances)))
    sample = NodeSample(node="gpu-node-1", tick=1, timestamp=1.7e9, gpus=tuple(gpus))
    pids = [p.pid for g in sample.gpus for m in g.instances for p in m.processes]
    return sample, tuple(assignments), pids


def timed(rounds: int, work) -> tuple[float, float]:
    """Median and p99 in microseconds."""
    gc.collect()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        samples.append((time.perf_counter() - start) * 1e6)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def cache_bytes(pods: list[PodInfo]) -> int:
    """Bytes allocated while building the PodInfo objects and a PodCache holding them (and its index)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    rebuilt = make_pods(len(pods))
    cache = PodCache(rebuilt)
    cache.index()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    total = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    del cache, rebuilt
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=500)
    args = parser.parse_args()
    pods = make_pods(PODS)
    cache = PodCache(pods)
    proc_root = Path(tempfile.mkdtemp(prefix="bench-proc-"))
    try:
        sample, assignments, pids = make_node(pods, proc_root)
        warm_reader = ProcReader(str(proc_root))
        warm_reader.read(pids)
        index = cache.index()
        proc = warm_reader.read(pids)

        def join():
            attribute(sample, assignments=assignments, index=index, proc=proc, kubelet_ok=True, api_ok=True)

        def tick_warm():
            attribute(sample, assignments=assignments, index=cache.index(), proc=warm_reader.read(pids),
                      kubelet_ok=True, api_ok=True)
            unknown_devices(sample, assignments)

        rows = [
            ("proc reads, cold (new reader)", *timed(args.rounds, lambda: ProcReader(str(proc_root)).read(pids))),
            ("proc reads, warm (cached)", *timed(args.rounds, lambda: warm_reader.read(pids))),
            ("join only", *timed(args.rounds, join)),
            ("full tick, warm", *timed(args.rounds, tick_warm)),
        ]
        result = attribute(sample, assignments=assignments, index=index, proc=proc, kubelet_ok=True, api_ok=True)
        assert len(result.devices) == GPUS * INSTANCES_PER_GPU and len(result.processes) == len(pids)
    finally:
        shutil.rmtree(proc_root, ignore_errors=True)
    memory = cache_bytes(pods)
    print(f"attribution: {GPUS * INSTANCES_PER_GPU} MIG instances, {len(pids)} processes, {PODS} pods, "
          f"{args.rounds} rounds")
    print(f"{'measure':<34} {'median µs':>10} {'p99 µs':>10}")
    for name, median, p99 in rows:
        print(f"{name:<34} {median:>10.1f} {p99:>10.1f}")
    print(f"{'pod cache at ' + str(PODS) + ' pods (tracemalloc)':<34} {memory / 1024:>10.1f} KiB "
          f"({memory / PODS:.0f} B/pod incl. PodInfo)")


if __name__ == "__main__":
    main()
