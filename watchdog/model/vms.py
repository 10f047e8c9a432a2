"""KubeVirt VMs as attribution sees them: the VMIs on this node and who owns each vGPU.

On a vGPU host the GPU's tenants are VMs, not pods' processes: NVML names each vGPU's VM by its UUID
(``VgpuSample.vm_id``), and on KVM that is the libvirt domain UUID, which KubeVirt sets from the VMI's
``spec.domain.firmware.uuid``. ``VmiInfo`` carries what the join needs of a VirtualMachineInstance, and what the
action rules need to know before asking for its launcher pod's eviction, which KubeVirt turns into a live migration
or refuses (docs/action.md, "Virtual machines (KubeVirt)"); ``VgpuOwner`` is the join's answer for one vGPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from watchdog.model.pods import PodRef

# The NVIDIA GPU Operator's sandbox device plugin (kubevirt-gpu-device-plugin) advertises a vGPU type as
# nvidia.com/<type name> with blanks and dashes as underscores (GRID_A100_4C, NVIDIA_A100_4C) and a whole GPU for
# passthrough as nvidia.com/<PCI device name> (GA100_A100_PCIE_80GB). So an nvidia.com device of a VMI whose name
# does not start with a vGPU prefix is read as a passed-through GPU, which cannot live-migrate.
NVIDIA_PREFIX = "nvidia.com/"
VGPU_PREFIXES = ("GRID_", "NVIDIA_")
# The virt-launcher pod's labels (kubevirt/kubevirt staging/src/kubevirt.io/api/core/v1/types.go: AppLabel,
# CreatedByLabel, the VMI's uid).
LAUNCHER_LABEL = "kubevirt.io"
LAUNCHER_VALUE = "virt-launcher"
CREATED_BY_LABEL = "kubevirt.io/created-by"
# The launcher pod's annotation naming its VMI (DomainAnnotation), by which KubeVirt's eviction webhook finds it.
DOMAIN_ANNOTATION = "kubevirt.io/domain"


def is_vgpu_resource(name: str) -> bool:
    """Whether a device or resource name is a vGPU type (nvidia.com/GRID_…, nvidia.com/NVIDIA_…)."""
    return name.startswith(NVIDIA_PREFIX) and name[len(NVIDIA_PREFIX):].upper().startswith(VGPU_PREFIXES)


@dataclass(frozen=True, slots=True)
class VmiInfo:
    """One kubevirt.io/v1 VirtualMachineInstance, reduced to what the vGPU join and the action rules need."""

    namespace: str
    name: str
    uid: str
    firmware_uuid: str  # spec.domain.firmware.uuid, lower case; "" when unset
    node: str = ""  # status.nodeName
    phase: str = ""  # status.phase
    # The strategy KubeVirt applies to an eviction of the launcher pod: spec.evictionStrategy, else the KubeVirt CR's
    # spec.configuration.evictionStrategy ("LiveMigrate", "LiveMigrateIfPossible", "External", "None"); "" when
    # neither is set (or the cluster default could not be read): an eviction then simply stops the VM.
    eviction_strategy: str = ""
    strategy_from_cluster: bool = False  # eviction_strategy is the cluster-wide default, not the VMI's own
    live_migratable: bool = False  # condition LiveMigratable is "True" (KubeVirt's IsMigratable)
    evacuation_node: str = ""  # status.evacuationNodeName: an eviction marked it, a migration is due
    migrating: bool = False  # a migration started and has not ended, or an evacuation is pending
    migration_end: str = ""  # status.migrationState.endTimestamp of the last finished migration (RFC 3339)
    passthrough: tuple[str, ...] = ()  # whole GPUs passed through (spec.domain.devices gpus/hostDevices)
    vgpu_resources: tuple[str, ...] = ()  # vGPU types it requests (nvidia.com/GRID_…, nvidia.com/NVIDIA_…)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class VgpuOwner:
    """The VMI a vGPU's VM is, and the virt-launcher pod running it (None when no live pod was found)."""

    namespace: str
    vmi: str
    pod: PodRef | None = None
