"""vGPU hosts: each VM's vGPU as a device, and the one case where VMs contend for SM time.

Pure (no I/O). On a vGPU host the GPU's tenants are KubeVirt VMs, sampled host-side: NVML lists each active vGPU
with its framebuffer and its share of the GPU (``VgpuSample``), and attribution names the VMI and its virt-launcher
pod (``Attribution.vgpus``). A vGPU owned by a live launcher pod becomes a ``Device`` of that pod, so every finding
names the pod and the action stage works unchanged; one whose VM maps to no VMI or no live pod is a device of no pod,
reported like a process outside Kubernetes (detection/host_processes.py) and never acted on.

Which vGPUs contend for what depends on how they are backed and scheduled (NVIDIA Virtual GPU Software User Guide,
"Changing Scheduling Behavior for Time-Sliced vGPUs"; NVIDIA vGPU knowledge base, "vGPU Schedulers"):

* time-sliced vGPUs under the **best-effort** scheduler take turns round robin and an idle VM cedes its turn, so a
  busy neighbour takes what a VM does not get: the *vgpu* domain, judged like a time-sliced GPU (interference.py);
* under **equal share** or **fixed share** each VM gets its slice whatever its neighbours do; a VM held at its slice
  is throttled by its own slice, not by a neighbour, so there is no SM domain at all, and none under a scheduler
  NVML did not name (when in doubt, no victim);
* **MIG-backed** vGPUs own a GPU instance: isolated SMs, L2 and DRAM, not the board's power or PCIe link, so each
  stands for its GI in the power and PCIe domains (domains.py, pcie.py), in place of any MIG device of that GI.

Every time-sliced vGPU also stays in its GPU's power domain: no vGPU scheduler partitions the board's power budget.
"""

from __future__ import annotations

from typing import Sequence

from watchdog.detection.domain_types import Device, Domain, DomainKind, unique_refs
from watchdog.model import EMPTY, Attribution, GpuSample

# The vGPU scheduler under which a VM's share of a time-sliced GPU depends on its neighbours' demand.
CONTENDED_SCHEDULER = "best_effort"


def held_gpu_instances(gpu: GpuSample) -> frozenset[int]:
    """The GPU instances MIG-backed vGPUs stand for: a MIG device of one of them is not a device of its own."""
    return frozenset(vgpu.gpu_instance for vgpu in gpu.vgpus if vgpu.gpu_instance is not None)


def vgpu_devices(gpu: GpuSample, attribution: Attribution, *, leave_out: frozenset[str]) -> list[Device]:
    """One device per active vGPU of ``gpu``: its VM's launcher pod (none when unmapped), its framebuffer as the
    device's memory, its SM and memory-controller shares as the pod's use."""
    owners = attribution.vgpus
    gis = {mig.gpu_instance: mig for mig in gpu.instances} if gpu.instances else {}
    devices: list[Device] = []
    for vgpu in gpu.vgpus:
        if vgpu.uuid in leave_out:
            continue
        owner = owners.get(vgpu.uuid)
        pod = owner.pod if owner is not None else None
        gi = gis.get(vgpu.gpu_instance) if vgpu.gpu_instance is not None else None
        sm = vgpu.sm_util
        if sm is None and gi is not None:
            sm = gi.sm_util  # GPM on the GI's MIG device, where the sample lists one
        pods = (pod,) if pod is not None else ()
        key = pod.key if pod is not None else ""
        devices.append(Device(
            uuid=vgpu.uuid,
            gpu=gpu,
            mig=None,
            assigned=pods,
            pods=pods,
            processes=(),
            memory_total=vgpu.fb_total_bytes,
            memory_used=vgpu.fb_used_bytes,
            memory_reserved=None,
            pod_memory={key: vgpu.fb_used_bytes} if pod is not None and vgpu.fb_used_bytes is not None else EMPTY,
            pod_sm={key: sm} if pod is not None and sm is not None else EMPTY,
            pod_dram={key: vgpu.memory_util} if pod is not None and vgpu.memory_util is not None else EMPTY,
            unattributed_sm=sm if pod is None else None,
            vgpu=vgpu,
            vgpu_gi=gi,
        ))
    return devices


def vgpu_domain(gpu: GpuSample, devices: Sequence[Device], *, busy: float | None) -> Domain | None:
    """The SM-time domain of a best-effort GPU's time-sliced vGPUs; None under any other scheduler, or with fewer
    than two VMs' pods on it. ``busy``: the GPU's own account of its busy time (domains.timeslice_busy over
    ``time_sliced_shares``)."""
    if gpu.vgpu_scheduler != CONTENDED_SCHEDULER:
        return None
    members = [d for d in devices if d.vgpu is not None and d.vgpu.gpu_instance is None]
    pods = unique_refs([ref for d in members for ref in d.pods])
    if len(pods) < 2:
        return None
    activity: dict[str, float | None] = {ref.key: None for ref in pods}
    for device in members:
        for key, value in device.pod_sm.items():  # a VM with two vGPUs on one GPU: its shares add up
            activity[key] = min(1.0, (activity[key] or 0.0) + value)
    return Domain(
        key=f"vgpu/{gpu.uuid}",
        kind=DomainKind.VGPU,
        resource="sm",
        gpu=gpu,
        pods=pods,
        activity=activity,
        share={ref.key: 1.0 for ref in pods},  # each VM's SM share is of the whole GPU's time
        busy=busy,
    )


def time_sliced_shares(gpu: GpuSample) -> list[float]:
    """Every time-sliced VM's SM share of the GPU, a VM of no known pod's too: all count towards how busy it is."""
    return [vgpu.sm_util for vgpu in gpu.vgpus if vgpu.gpu_instance is None and vgpu.sm_util is not None]


def vmis_by_pod(attribution: Attribution) -> dict[str, str]:
    """Launcher pod key ("ns/pod") → the name of the VMI it runs, for the evidence of a finding about VMs."""
    return {owner.pod.key: owner.vmi for owner in attribution.vgpus.values() if owner.pod is not None}
