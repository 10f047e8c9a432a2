"""Who owns each vGPU of a vGPU host: the join of NVML's VM ids with KubeVirt's VMIs and virt-launcher pods.

Pure: no I/O, no asyncio. The facts it relies on:
- ``nvmlVgpuInstanceGetVmID`` answers the VM's id and its type; on KVM the type is ``NVML_VGPU_VM_ID_UUID`` and
  the id the libvirt domain UUID (NVML API reference, "vGPU Instance Queries"; ``VgpuSample.vm_id_type == "uuid"``).
  A domain id (Xen, ``NVML_VGPU_VM_ID_DOMAIN_ID``) cannot name a VMI, so such vGPUs stay unattributed.
- KubeVirt defines the domain with the VMI's ``spec.domain.firmware.uuid`` as its UUID (virt-launcher's converter,
  kubevirt/kubevirt pkg/virt-launcher/virtwrap/converter); for a VMI of a VirtualMachine the VM controller fills the
  firmware UUID (pkg/virt-controller/watch/vm/firmware.go).
- The virt-launcher pod is labelled ``kubevirt.io: virt-launcher`` and ``kubevirt.io/created-by: <VMI uid>``
  (kubevirt/kubevirt staging/src/kubevirt.io/api/core/v1/types.go, CreatedByLabel). During a live migration two
  launcher pods exist; the one on this node is the one running the vGPU.
A VM id that names no VMI (KubeVirt absent, a VM started by hand, a VMI not listed yet) leaves the vGPU
unattributed; it is never guessed from names.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Iterable, Mapping

from watchdog.model import EMPTY, NodeSample, PodIndex, PodRef, VgpuOwner, VmiInfo
from watchdog.model.vms import CREATED_BY_LABEL, LAUNCHER_LABEL, LAUNCHER_VALUE



def launcher_pods(index: PodIndex, *, node: str) -> Mapping[str, PodRef]:
    """VMI uid → its live virt-launcher pod on ``node`` (any node when ``node`` is "")."""
    found: dict[str, PodRef] = {}
    for pod in index.pods.values():
        if pod.labels.get(LAUNCHER_LABEL) != LAUNCHER_VALUE or not pod.live:
            continue
        if node and pod.node and pod.node != node:
            continue
        owner = pod.labels.get(CREATED_BY_LABEL)
        if owner:
            found[owner] = pod.ref
    return found


def vmis_by_uid(vmis: Iterable[VmiInfo]) -> Mapping[str, VmiInfo]:
    """VMI uid → VMI (a launcher pod's kubevirt.io/created-by label names its VMI's uid)."""
    found = {vmi.uid: vmi for vmi in vmis if vmi.uid}
    return MappingProxyType(found) if found else EMPTY


def vgpu_owners(sample: NodeSample, vmis: Iterable[VmiInfo], index: PodIndex) -> Mapping[str, VgpuOwner]:
    """vGPU UUID → its owner, for every vGPU of ``sample`` whose VM UUID is a VMI's firmware UUID."""
    by_uuid = {vmi.firmware_uuid.lower(): vmi for vmi in vmis if vmi.firmware_uuid}
    if not by_uuid:
        return EMPTY
    pods = launcher_pods(index, node=sample.node)
    owners: dict[str, VgpuOwner] = {}
    for gpu in sample.gpus:
        for vgpu in gpu.vgpus:
            vmi = by_uuid.get(vgpu.vm_id.lower()) if vgpu.vm_id_type == "uuid" else None
            if vmi is not None:
                owners[vgpu.uuid] = VgpuOwner(namespace=vmi.namespace, vmi=vmi.name, pod=pods.get(vmi.uid))
    return MappingProxyType(owners) if owners else EMPTY
