"""Each pod's use of each device, summed once per tick from the attribution's own PID → pod map."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from watchdog.attribution.join import attribute
from watchdog.model import ContainerInfo, GpuSample, MigSample, NodeSample, PodIndex, PodRef, PodUsage, ProcessSample

GIB = 1 << 30


def shared_gpu_sample() -> NodeSample:
    """One time-sliced GPU (pod a: two containers, pod b, a host process) and one MIG GPU, one instance in use."""
    whole = GpuSample(index=0, uuid="GPU-ts", name="NVIDIA H200", processes=(
        ProcessSample(1, 2 * GIB, sm_util=0.25, memory_util=0.125),  # a/main
        ProcessSample(2, 3 * GIB, sm_util=None, memory_util=0.25),  # b/main
        ProcessSample(3, GIB, sm_util=0.125, memory_util=None),  # a/main again
        ProcessSample(4, None, sm_util=0.5),  # a/side
        ProcessSample(5, GIB, sm_util=0.0625),  # no pod
    ))
    mig = GpuSample(index=1, uuid="GPU-mig", name="NVIDIA H200", mig_enabled=True, instances=(
        MigSample(uuid="MIG-1", gpu_index=1, gpu_instance=1, compute_instance=0, profile="1g.18gb",
                  processes=(ProcessSample(6, 4 * GIB, gpu_instance=1, compute_instance=0),)),
        MigSample(uuid="MIG-idle", gpu_index=1, gpu_instance=2, compute_instance=0, profile="1g.18gb"),
    ))
    lost = GpuSample(index=2, uuid="GPU-lost", name="NVIDIA H200", lost=True)
    return NodeSample(node="n", tick=1, timestamp=1.0, gpus=(whole, mig, lost))


def joined(make_pod):
    a = make_pod("a", containers=(ContainerInfo("main", "a" * 64), ContainerInfo("side", "c" * 64)))
    b = make_pod("b", namespace="web", containers=(ContainerInfo("main", "b" * 64),))
    sample = shared_gpu_sample()
    proc = {1: (a.uid, "a" * 64), 2: (b.uid, "b" * 64), 3: (a.uid, "a" * 64), 4: (a.uid, "c" * 64),
            6: (b.uid, "b" * 64)}
    attribution = attribute(sample, assignments=[], index=PodIndex.of([a, b]), proc=proc, kubelet_ok=True,
                            api_ok=True)
    return sample, attribution, a, b


def test_each_process_counts_once_in_its_device_pod_and_container(make_pod):
    sample, attribution, a, b = joined(make_pod)
    usage = attribution.usage(sample)
    assert set(usage) == {"GPU-ts", "MIG-1"}  # idle instances and lost GPUs have no users
    assert usage["GPU-ts"] == (
        PodUsage(PodRef("ml", "a", a.uid, "main"), 3 * GIB, 0.375, 0.125),
        PodUsage(PodRef("web", "b", b.uid, "main"), 3 * GIB, None, 0.25),
        PodUsage(PodRef("ml", "a", a.uid, "side"), None, 0.5, None),
        PodUsage(None, GIB, 0.0625, None),  # the processes no known pod owns, gathered
    )
    assert usage["MIG-1"] == (PodUsage(PodRef("web", "b", b.uid, "main"), 4 * GIB, None, None),)


def test_summed_once_per_attribution_and_sample(make_pod):
    sample, attribution, _, _ = joined(make_pod)
    first = attribution.usage(sample)
    assert attribution.usage(sample) is first  # detection and every scrape of the tick read the same sums
    later = dataclasses.replace(sample, tick=2)
    assert attribution.usage(later) is not first and attribution.usage(later) == first


def test_a_pid_taken_back_after_the_join_is_no_longer_its_pods(make_pod):
    """The service holds back a process whose pod is not yet listed for the device: it must not count as that
    pod's use (the sums follow ``processes``, never a copy made before)."""
    sample, attribution, a, _ = joined(make_pod)
    attribution.usage(sample)
    kept = {pid: ref for pid, ref in attribution.processes.items() if pid != 4}
    held = dataclasses.replace(attribution, processes=MappingProxyType(kept))
    users = held.usage(sample)["GPU-ts"]
    assert [user.ref.container if user.ref else None for user in users] == ["main", "main", None]
    assert users[-1] == PodUsage(None, GIB, 0.5625, None)  # pid 4 now counts with the unowned
