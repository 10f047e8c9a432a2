"""When a virt-launcher pod may be a candidate: only when evicting it relieves the GPU by moving its VM elsewhere.

A KubeVirt VM runs in a virt-launcher pod, and an eviction of that pod is judged by virt-api's validating webhook
"virt-launcher-eviction-interceptor.kubevirt.io" before the API server's PodDisruptionBudget check
(kubevirt/kubevirt docs/handling-eviction-requests.md, "Handling Eviction Requests";
pkg/virt-api/webhooks/validating-webhook/admitters/pod-eviction-admitter.go). With the eviction strategy
LiveMigrate (or LiveMigrateIfPossible on a migratable VM) the eviction is refused and the VM is evacuated:
live-migrated to another node, still running. With None, unset, or LiveMigrateIfPossible on a VM that cannot
migrate, the eviction passes and the VM is stopped. With External the eviction is refused and the VMI marked the
same way, but KubeVirt never migrates it (pkg/util/migrations VMIMigratableOnEviction): an outside controller acts
on the mark, cluster-api-provider-kubevirt by tearing the VM down; so External counts as a VM an eviction may stop.
So, before any request:
- a launcher pod whose VMI is not known (not listed yet) is never a candidate: the agent never acts blind;
- a VM holding a whole GPU by passthrough cannot migrate: reported, never evicted, unless the policy says `evict`;
- a VM already migrating is leaving: nobody else is evicted for what it uses;
- a VM that an eviction would stop is not a candidate unless the policy allows stopping it.
A VMI with LiveMigrate that cannot migrate stays a candidate: KubeVirt refuses that eviction itself, and the answer
(`blocked`, with KubeVirt's reason) is what an operator should see. The cooldown after a migration is pacing's
(vm_cooldown.py): it needs a clock. The same policy shape as the descheduler's KubevirtMigrationAware evictor
plugin (openshift/descheduler PR #591): no eviction during a migration, an adaptive cooldown after one.
PURE: no I/O, no asyncio.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from watchdog.config.action import VmPolicy
from watchdog.model import EvictionResult, PodInfo, VmiInfo
from watchdog.model.vms import CREATED_BY_LABEL, LAUNCHER_LABEL, LAUNCHER_VALUE

# The launcher pod's labels live in model/vms.py (LAUNCHER_LABEL, CREATED_BY_LABEL); the webhook itself finds the
# VMI by the pod's kubevirt.io/domain annotation, its name.
# Strategies under which KubeVirt evacuates the VM instead of letting the pod go (migrations.VMIEvictionStrategy).
MIGRATE = "LiveMigrate"
MIGRATE_IF_POSSIBLE = "LiveMigrateIfPossible"
EXTERNAL = "External"


@dataclass(frozen=True, slots=True)
class VmRefusal:
    """Why a launcher pod is not a candidate: the result to report and a sentence saying why."""

    result: EvictionResult
    detail: str


def is_launcher(pod: PodInfo) -> bool:
    """Whether the pod runs a KubeVirt VM."""
    return pod.labels.get(LAUNCHER_LABEL) == LAUNCHER_VALUE


def launcher_vmi(pod: PodInfo, vmis: Mapping[str, VmiInfo]) -> VmiInfo | None:
    """The VMI a launcher pod runs, by its kubevirt.io/created-by label (the VMI's uid)."""
    uid = pod.labels.get(CREATED_BY_LABEL)
    return vmis.get(uid) if uid else None


def will_migrate(vmi: VmiInfo) -> bool:
    """Whether KubeVirt answers an eviction of the VMI's launcher pod by live-migrating the VM, still running
    (KubeVirt's VMIMigratableOnEviction; LiveMigrate on a VM that cannot migrate is refused by KubeVirt itself)."""
    strategy = vmi.eviction_strategy
    return strategy == MIGRATE or (strategy == MIGRATE_IF_POSSIBLE and vmi.live_migratable)


def evacuates(vmi: VmiInfo) -> bool:
    """Whether KubeVirt's webhook answers an eviction of the VMI's launcher pod by marking the VMI and refusing with
    "Eviction triggered evacuation of VMI" (the live migration, and External's hand-over to an outside controller)."""
    return will_migrate(vmi) or vmi.eviction_strategy == EXTERNAL


def vm_refusal(pod: PodInfo, vmis: Mapping[str, VmiInfo], policy: VmPolicy) -> VmRefusal | None:
    """Why this launcher pod is not a candidate, or None (also for a pod that runs no VM)."""
    if not is_launcher(pod):
        return None
    vmi = launcher_vmi(pod, vmis)
    if vmi is None:
        return VmRefusal(EvictionResult.UNSAFE, f"virt-launcher pod {pod.namespace}/{pod.name}: its VMI is not "
                                                "listed (yet): never act blind")
    if vmi.passthrough and policy.passthrough != "evict":
        return VmRefusal(EvictionResult.VM_PASSTHROUGH,
                         f"VMI {vmi.key} holds a whole GPU by passthrough ({', '.join(vmi.passthrough)}): it cannot "
                         "live-migrate; report only (policy action.vms.passthrough: report)")
    if vmi.migrating:
        where = f" (evacuating from {vmi.evacuation_node})" if vmi.evacuation_node else ""
        return VmRefusal(EvictionResult.VM_MIGRATING, f"VMI {vmi.key} is being live-migrated{where}: it is leaving")
    if not will_migrate(vmi) and not policy.evict_without_migration:
        return VmRefusal(EvictionResult.VM_NOT_MIGRATABLE,
                         f"VMI {vmi.key}: {_why_no_migration(vmi)}, so an eviction would stop the VM "
                         "(policy action.vms.evict_without_migration: false)")
    return None


def _why_no_migration(vmi: VmiInfo) -> str:
    if vmi.eviction_strategy == MIGRATE_IF_POSSIBLE:
        return "evictionStrategy LiveMigrateIfPossible and the VM is not live-migratable"
    if vmi.eviction_strategy == EXTERNAL:
        where = "the cluster default" if vmi.strategy_from_cluster else "the VMI's"
        return (f"evictionStrategy External ({where}): KubeVirt never migrates it, an outside controller acts on "
                "the eviction (cluster-api-provider-kubevirt tears the VM down)")
    if not vmi.eviction_strategy:
        return "no evictionStrategy (neither the VMI's nor a cluster default read from the KubeVirt CR)"
    where = "the cluster default" if vmi.strategy_from_cluster else "the VMI's"
    return f"evictionStrategy {vmi.eviction_strategy} ({where})"
