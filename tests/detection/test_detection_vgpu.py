"""vGPU hosts: KubeVirt VMs' vGPUs as devices of their launcher pods, contention only under the best-effort scheduler,
MIG-backed vGPUs in the power domain, quotas by framebuffer size, and a VM of no pod reported, never acted on."""

from __future__ import annotations

import dataclasses

import pytest
from detection_builders import GIB, MAX_CLOCK, SW_POWER_CAP, Noise, attribution, gpu, mig, pod, sample

from watchdog.config.detection import DetectionPolicy
from watchdog.detection import Detector, DomainKind, devices_of, domains_of
from watchdog.model import (REPORT_ONLY_KINDS, FindingKind, GpuSample, NodeSample, PodIndex, PodInfo, Severity,
                            VgpuOwner, VgpuSample, VmiInfo)

ONSET, TICKS = 40, 70
LAUNCHER = {"kubevirt.io": "virt-launcher"}
VM_A = pod("team-a", "virt-launcher-infer-vm-x1", priority=1000, labels=LAUNCHER)
VM_B = pod("team-b", "virt-launcher-train-vm-y2", labels=LAUNCHER)
VM_C = pod("team-c", "virt-launcher-notebook-vm-z3", labels=LAUNCHER)
OWNERS = {"VGPU-a": ("infer-vm", VM_A), "VGPU-b": ("train-vm", VM_B), "VGPU-c": ("notebook-vm", VM_C)}


def vgpu(uuid: str, *, sm: float | None, gi: int | None = None, type_name: str = "NVIDIA H100-20C",
         fb_total: int = 20 * GIB, fb_used: int = 2 * GIB) -> VgpuSample:
    return VgpuSample(uuid=uuid, type_name=type_name, vm_id=f"vm-{uuid}", vm_id_type="uuid", fb_used_bytes=fb_used,
                      fb_total_bytes=fb_total, gpu_instance=gi, sm_util=sm, memory_util=0.1)


def vm_attribution(*uuids: str, healthy: bool = True):
    """The launcher pods are in no kubelet assignment (a vGPU is not a device plugin's GPU): only Attribution.vgpus
    joins them to their vGPUs."""
    pods: list[PodInfo] = [OWNERS[uuid][1] for uuid in uuids]
    owners = {uuid: VgpuOwner(namespace=OWNERS[uuid][1].namespace, vmi=OWNERS[uuid][0], pod=OWNERS[uuid][1].ref)
              for uuid in uuids}
    return dataclasses.replace(attribution(devices={}, extra_pods=pods, healthy=healthy), vgpus=owners)


def host(tick: int, vgpus: tuple[VgpuSample, ...], *, scheduler: str | None = "best_effort",
         gpu_util: float | None = None, loss: float = 0.0, instances=()) -> NodeSample:
    base = gpu("GPU-0", gpu_util=gpu_util, clock=MAX_CLOCK * (1 - loss), reasons=SW_POWER_CAP if loss > 0 else 0,
               instances=instances)
    mig_backed = any(v.gpu_instance is not None for v in vgpus)
    physical: GpuSample = dataclasses.replace(base, vgpus=vgpus, vgpu_scheduler=scheduler,
                                              mig_enabled=base.mig_enabled or mig_backed)
    return sample(tick, [physical])


def share_taken(scheduler: str | None, *, seed: int = 7) -> list[NodeSample]:
    """VM A wants 0.6 of the GPU; from ONSET VM B asks for everything and A is held at 0.5 (round robin)."""
    noise = Noise(seed=seed)
    samples = []
    for t in range(TICKS):
        a, b = (0.5, 0.5) if t >= ONSET else (0.6, 0.2)
        a, b = noise(a, 0.015), noise(b, 0.015)
        samples.append(host(t, (vgpu("VGPU-a", sm=a), vgpu("VGPU-b", sm=b)), scheduler=scheduler,
                            gpu_util=min(1.0, a + b)))
    return samples


def run(samples, attr, detector: Detector | None = None) -> list[tuple]:
    detector = detector or Detector(DetectionPolicy())
    return [detector.step(s, attr) for s in samples]


def interference(history):
    return [f for tick in history for f in tick if f.kind is FindingKind.INTERFERENCE]


def test_each_mapped_vgpu_is_a_device_of_its_launcher_pod():
    tick = host(0, (vgpu("VGPU-a", sm=0.4, fb_used=3 * GIB), vgpu("VGPU-b", sm=0.3)))
    devices = {d.uuid: d for d in devices_of(tick, vm_attribution("VGPU-a", "VGPU-b"))}
    vm = devices["VGPU-a"]
    assert vm.pods == (VM_A.ref,) and vm.mig is None and vm.vgpu is not None
    assert (vm.memory_total, vm.memory_used) == (20 * GIB, 3 * GIB)
    assert vm.pod_sm == {VM_A.ref.key: 0.4} and vm.pod_dram == {VM_A.ref.key: 0.1}
    [domain] = [d for d in domains_of(list(devices.values())) if d.kind is DomainKind.VGPU]
    assert domain.key == "vgpu/GPU-0" and domain.resource == "sm"
    assert domain.busy == pytest.approx(0.7)  # no utilization.gpu: the VMs' shares summed


def test_best_effort_neighbour_taking_a_vms_share_is_the_culprit():
    history = run(share_taken("best_effort"), vm_attribution("VGPU-a", "VGPU-b"))
    assert not interference(history[:ONSET])
    [finding] = [f for f in history[-1] if f.kind is FindingKind.INTERFERENCE]
    assert finding.culprit == VM_B.ref and finding.victims == (VM_A.ref,)
    assert finding.domain == "vgpu/GPU-0" and finding.key == f"interference/vgpu/GPU-0/{VM_B.ref.key}"
    assert finding.severity is Severity.CRITICAL and finding.tenant == "team-b"
    assert finding.evidence["culprit_vmi"] == "train-vm" and finding.evidence["vmi"] == "infer-vm"
    assert finding.evidence["scheduler"] == "roundrobin" and finding.evidence["vgpu_scheduler"] == "best_effort"


@pytest.mark.parametrize("scheduler", ["equal_share", "fixed_share", None, "unknown"])
def test_no_vm_is_a_victim_of_a_neighbour_under_any_other_scheduler(scheduler):
    """Equal and fixed share hold each VM at its own slice whatever its neighbours do; an unknown scheduler is
    judged as no contention at all."""
    samples = share_taken(scheduler)
    assert not [d for d in domains_of(devices_of(samples[-1], vm_attribution("VGPU-a", "VGPU-b")))
                if d.kind is DomainKind.VGPU]
    assert interference(run(samples, vm_attribution("VGPU-a", "VGPU-b"))) == []


def mig_backed_host(t: int, *, a: float, b: float, c: float = 0.05, loss: float = 0.0, instances=()) -> NodeSample:
    """A MIG-backed vGPU host: VM A on a 3g GPU instance, B and C on 1g ones (as power_sample's MIG devices)."""
    vgpus = (vgpu("VGPU-a", sm=a, gi=1, type_name="NVIDIA H100-3-40C"),
             vgpu("VGPU-b", sm=b, gi=2, type_name="NVIDIA H100-1-10C"),
             vgpu("VGPU-c", sm=c, gi=3, type_name="NVIDIA H100-1-10C"))
    return host(t, vgpus, scheduler=None, loss=loss, instances=instances)


def test_a_mig_backed_vm_that_tips_the_power_cap_is_the_culprit():
    noise = Noise()
    samples = [mig_backed_host(t, a=noise(0.8, 0.02), b=noise(1.0 if t >= ONSET else 0.05, 0.02),
                               loss=0.25 if t >= ONSET else 0.0) for t in range(TICKS)]
    history = run(samples, vm_attribution("VGPU-a", "VGPU-b", "VGPU-c"))
    assert not interference(history[:ONSET])
    [finding] = [f for f in history[-1] if f.kind is FindingKind.INTERFERENCE]
    assert finding.domain == "gpu/GPU-0/power" and finding.resource == "power"
    assert finding.culprit == VM_B.ref and finding.victims == (VM_A.ref,)
    assert finding.evidence["culprit_vmi"] == "train-vm" and finding.evidence["vmi"] == "infer-vm"
    assert finding.severity is Severity.CRITICAL
    # B's vGPU stands for a 1g instance: 1/7 of the GPU's compute.
    assert finding.usage[VM_B.ref.key] == pytest.approx(finding.evidence["antagonist_use"] / 7, abs=0.01)


def test_a_mig_device_of_a_vgpus_gpu_instance_is_not_counted_again():
    instances = (mig("MIG-1", gi=1, profile="3g.40gb", sm=0.7), mig("MIG-9", gi=9, sm=0.3))
    tick = mig_backed_host(0, a=0.7, b=0.2, instances=instances)
    devices = devices_of(tick, vm_attribution("VGPU-a", "VGPU-b", "VGPU-c"))
    assert sorted(d.uuid for d in devices) == ["MIG-9", "VGPU-a", "VGPU-b", "VGPU-c"]
    vm_a = next(d for d in devices if d.uuid == "VGPU-a")
    assert vm_a.vgpu_gi is instances[0] and vm_a.share == pytest.approx(3 / 7)
    [power] = [d for d in domains_of(devices) if d.kind is DomainKind.POWER]
    assert power.unattributed == pytest.approx(0.3 / 7)  # GI 9's instance, nobody's; GI 1 is VM A's, not again


def test_a_tenants_memory_quota_counts_the_framebuffer_size_not_its_use():
    policy = DetectionPolicy.model_validate({"quota": {"tenants": {"team-a": {"gpu_memory_bytes": 10 * GIB}},
                                                       "for_ticks": 3}})
    detector = Detector(policy)
    attr = vm_attribution("VGPU-a", "VGPU-b")
    history = [detector.step(host(t, (vgpu("VGPU-a", sm=0.1, fb_used=1 * GIB), vgpu("VGPU-b", sm=0.1))), attr)
               for t in range(5)]
    [breach] = [f for f in history[-1] if f.kind is FindingKind.QUOTA]
    assert breach.tenant == "team-a" and breach.culprit == VM_A.ref
    assert breach.evidence["usage"] == 20 * GIB and breach.needed == 10 * GIB


def test_a_vm_of_no_pod_is_reported_like_a_host_process_and_never_acted_on():
    attr = vm_attribution("VGPU-a")  # VGPU-x's VM maps to no VMI
    history = run([host(t, (vgpu("VGPU-a", sm=0.3), vgpu("VGPU-x", sm=0.6, fb_total=40 * GIB))) for t in range(5)],
                  attr)
    [finding] = history[-1]
    assert finding.kind is FindingKind.UNAUTHORIZED_HOST and finding.kind in REPORT_ONLY_KINDS
    assert finding.culprit is None and finding.victims == (VM_A.ref,)
    assert finding.key == "unauthorized-host/GPU-0/vgpu/VGPU-x"
    assert finding.evidence["vm_id"] == "vm-VGPU-x" and finding.evidence["framebuffer_bytes"] == 40 * GIB
    assert finding.severity is Severity.CRITICAL  # 0.6 of the GPU's time


def test_a_vmi_without_a_live_launcher_pod_is_reported_with_its_name():
    owners = {**vm_attribution("VGPU-a").vgpus, "VGPU-x": VgpuOwner(namespace="team-x", vmi="orphan-vm", pod=None)}
    attr = dataclasses.replace(vm_attribution("VGPU-a"), vgpus=owners)
    history = run([host(t, (vgpu("VGPU-a", sm=0.3), vgpu("VGPU-x", sm=0.1, fb_total=4 * GIB))) for t in range(5)],
                  attr)
    [finding] = history[-1]
    assert finding.kind is FindingKind.UNAUTHORIZED_HOST and finding.culprit is None
    assert finding.evidence["vmi"] == "team-x/orphan-vm" and finding.severity is Severity.WARNING


def test_nothing_about_a_vm_of_no_pod_while_attribution_is_unhealthy():
    history = run([host(t, (vgpu("VGPU-a", sm=0.3), vgpu("VGPU-x", sm=0.6))) for t in range(5)],
                  vm_attribution("VGPU-a", healthy=False))
    assert [f for tick in history for f in tick if f.kind is FindingKind.UNAUTHORIZED_HOST] == []


def test_a_vm_of_no_pod_on_a_gpu_of_no_cluster_vm_is_nobodys_to_defend():
    history = run([host(t, (vgpu("VGPU-x", sm=0.6),)) for t in range(5)], vm_attribution())
    assert history[-1] == ()


def test_a_node_without_vgpus_builds_no_vgpu_device():
    tick = sample(0, [gpu("GPU-0", gpu_util=0.5)])
    assert [d.vgpu for d in devices_of(tick, attribution(devices={}))] == [None]


def test_no_vm_of_no_pod_is_reported_while_a_launcher_pods_vmi_is_not_listed_yet():
    # A VM just started (or arriving by live migration: its VMI keeps the source node's label until the hand-over)
    # runs its vGPU before the next VMI list names it: its launcher pod is here, its VMI is not. The vGPU of no
    # known VM may be that one: neither raised nor cleared until the list catches up.
    infer = VmiInfo(namespace="team-a", name="infer-vm", uid="uid-infer-vm", firmware_uuid="")
    vm_a = dataclasses.replace(VM_A, labels={**LAUNCHER, "kubevirt.io/created-by": infer.uid})
    new = pod("team-n", "virt-launcher-new-vm-q9", labels={**LAUNCHER, "kubevirt.io/created-by": "uid-new-vm"})
    attr = dataclasses.replace(vm_attribution("VGPU-a"), index=PodIndex.of([vm_a, new]), vmis={infer.uid: infer})
    samples = [host(t, (vgpu("VGPU-a", sm=0.3), vgpu("VGPU-x", sm=0.6))) for t in range(8)]
    detector = Detector(DetectionPolicy())
    assert [f for tick in run(samples, attr, detector) for f in tick if f.kind is FindingKind.UNAUTHORIZED_HOST] == []
    # Once the new VM's VMI is listed and VGPU-x is still nobody's, it is reported as before.
    attr = dataclasses.replace(attr, vmis={**attr.vmis, "uid-new-vm": VmiInfo(
        namespace="team-n", name="new-vm", uid="uid-new-vm", firmware_uuid="")})
    later = [host(t, (vgpu("VGPU-a", sm=0.3), vgpu("VGPU-x", sm=0.6))) for t in range(8, 14)]
    assert [f.kind for f in run(later, attr, detector)[-1]] == [FindingKind.UNAUTHORIZED_HOST]
