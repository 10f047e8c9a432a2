"""KubeVirt VMs as attribution sees them: the VMIs on this node and who owns each vGPU.

On a vGPU host the GPU's tenants are VMs, not pods' processes: NVML names each vGPU's VM by its UUID
(``VgpuSample.vm_id``), and on KVM that is the libvirt domain UUID, which KubeVirt sets from the VMI's
``spec.domain.firmware.uuid``. ``VmiInfo`` carries what the join needs of a VirtualMachineInstance; ``VgpuOwner``
is the join's answer for one vGPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from watchdog.model.pods import PodRef


@dataclass(frozen=True, slots=True)
class VmiInfo:
    """One kubevirt.io/v1 VirtualMachineInstance, reduced to what the vGPU join needs."""

    namespace: str
    name: str
    uid: str
    firmware_uuid: str  # spec.domain.firmware.uuid, lower case; "" when unset
    node: str = ""  # status.nodeName
    phase: str = ""  # status.phase


@dataclass(frozen=True, slots=True)
class VgpuOwner:
    """The VMI a vGPU's VM is, and the virt-launcher pod running it (None when no live pod was found)."""

    namespace: str
    vmi: str
    pod: PodRef | None = None
