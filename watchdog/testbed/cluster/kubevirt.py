"""KubeVirt's objects for the simulated vGPU host: each VM of the scenario as a VirtualMachineInstance and the
virt-launcher pod that runs it, kept in step with the VM's life.

What the agent relies on, and what KubeVirt writes (kubevirt/kubevirt staging/src/kubevirt.io/api/core/v1/types.go
for the label names; pkg/virt-controller/services/template.go for the launcher pod):
- the VMI carries ``kubevirt.io/nodeName: <node>`` (NodeNameLabel: CRDs have no status.nodeName field selector),
  ``status.nodeName`` and ``status.phase``, and its ``spec.domain.firmware.uuid`` is the libvirt domain UUID, which
  NVML reports as the vGPU's VM id on KVM (nvmlVgpuInstanceGetVmID, NVML_VGPU_VM_ID_UUID);
- the pod is ``virt-launcher-<vmi>-<5 chars>`` in the VMI's namespace, labelled ``kubevirt.io: virt-launcher``,
  ``kubevirt.io/created-by: <VMI uid>`` and ``vm.kubevirt.io/name: <vmi>``, annotated ``kubevirt.io/domain: <vmi>``
  (how virt-api's eviction webhook finds the VMI), owned by the VMI, its main container named ``compute``;
- the VMI is LiveMigratable (an assumption of the test bed: KubeVirt sets that condition from what the VM holds),
  so a LiveMigrate VM's eviction becomes a migration (kubevirt_eviction.py); once one succeeds the VM runs on the
  target node, and this node's simulated GPU stops serving its vGPU (the node's ``migrated_vms``).
The VMI's and the pod's uids are derived from the seed so a run is reproducible, and the evaluation path
(evaluation/scenario_run.py) builds the same objects; the pod takes the VM's ``priority``.
"""

from __future__ import annotations

import logging
from typing import Any

from watchdog.testbed.cluster.apiserver import FakeApiServer
from watchdog.testbed.cluster.apiserver_pods import build_pod
from watchdog.testbed.cluster.apiserver_store import PODS, VMIS
from watchdog.testbed.cluster.kubevirt_eviction import DOMAIN_ANNOTATION
from watchdog.testbed.scenario import Scenario, format_uuid, stable_digest
from watchdog.testbed.scenario_parts import VmSpec

log = logging.getLogger(__name__)

LAUNCHER_LABEL = "kubevirt.io"  # value "virt-launcher"
CREATED_BY_LABEL = "kubevirt.io/created-by"
VMI_NAME_LABEL = "vm.kubevirt.io/name"
NODE_NAME_LABEL = "kubevirt.io/nodeName"
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # generated name suffixes (apimachinery/pkg/util/rand)


def vmi_uid(seed: int, vm: VmSpec) -> str:
    return format_uuid(stable_digest(seed, "vmi", vm.namespace, vm.name))


def launcher_name(seed: int, vm: VmSpec) -> str:
    digest = stable_digest(seed, "virt-launcher", vm.namespace, vm.name)
    return f"virt-launcher-{vm.name}-{''.join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:5])}"


def vmi_object(vm: VmSpec, *, seed: int, node: str, device_name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": vm.name, "namespace": vm.namespace, "uid": vmi_uid(seed, vm),
                     "labels": {NODE_NAME_LABEL: node}},
        "spec": {"evictionStrategy": vm.eviction_strategy,
                 "domain": {"firmware": {"uuid": vm.firmware_uuid},
                            "devices": {"gpus": [{"name": "gpu1", "deviceName": device_name}]}}},
        "status": {"phase": "Running", "nodeName": node, "conditions": [{"type": "Ready", "status": "True"},
                                                                       {"type": "LiveMigratable", "status": "True"}]},
    }


def launcher_pod(vm: VmSpec, *, seed: int, node: str) -> dict[str, Any]:
    uid = vmi_uid(seed, vm)
    body = build_pod(namespace=vm.namespace, name=launcher_name(seed, vm), node=node, priority=vm.priority or 0,
                     priority_class="", labels={LAUNCHER_LABEL: "virt-launcher", CREATED_BY_LABEL: uid,
                                                VMI_NAME_LABEL: vm.name},
                     annotations={DOMAIN_ANNOTATION: vm.name}, phase="Running", ready=True, containers=["compute"], owner_kind=None,
                     qos="Burstable", requests=None)
    body["metadata"]["uid"] = format_uuid(stable_digest(seed, "virt-launcher-uid", vm.namespace, vm.name))
    body["metadata"]["ownerReferences"] = [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                            "name": vm.name, "uid": uid, "controller": True,
                                            "blockOwnerDeletion": True}]
    return body


def running_objects(scenario: Scenario, tick: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(VMI, launcher pod) of every VM running at ``tick``, as the world publishes them."""
    node, seed = scenario.node, scenario.seed
    return [(vmi_object(vm, seed=seed, node=node, device_name=device_name(vm)), launcher_pod(vm, seed=seed, node=node))
            for gpu in scenario.gpus if gpu.vgpu is not None for vm in gpu.vgpu.vms if vm.running(tick)]


def device_name(vm: VmSpec) -> str:
    """The GPU Operator's sandbox device plugin advertises vGPU types as nvidia.com/<TYPE_NAME> (spaces and dashes
    as underscores)."""
    return "nvidia.com/" + vm.type.replace(" ", "_").replace("-", "_")


class KubevirtSync:
    """Creates each VM's VMI and launcher pod while it runs and removes them when it ends."""

    def __init__(self, api: FakeApiServer, scenario: Scenario, *, node: Any = None) -> None:
        """`node`: the simulated GPU node, whose ``migrated_vms`` (namespace, name) its vGPUs no longer serve."""
        self.api, self.scenario = api, scenario
        self.vms = [vm for gpu in scenario.gpus if gpu.vgpu is not None for vm in gpu.vgpu.vms]
        self._published: set[tuple[str, str]] = set()
        self.migrated: set[tuple[str, str]] = set()
        if node is not None:
            node.migrated_vms = self.migrated
        api.evacuations.on_migrated.append(self._migrated)

    def _migrated(self, namespace: str, vmi: str, source: str, _target: str) -> None:
        if source == self.scenario.node:
            log.info("VM %s/%s live-migrated off node %s", namespace, vmi, source)
            self.migrated.add((namespace, vmi))

    @property
    def namespaces(self) -> set[str]:
        return {vm.namespace for vm in self.vms}

    def sync(self, tick: int) -> None:
        self.api.evacuations.advance()  # KubeVirt's evacuation controller: one step a tick
        node, seed = self.scenario.node, self.scenario.seed
        for vm in self.vms:
            key = (vm.namespace, vm.name)
            if vm.running(tick) and key not in self._published:
                self.api.store.create(VMIS, vmi_object(vm, seed=seed, node=node, device_name=device_name(vm)))
                self.api.add_pod(launcher_pod(vm, seed=seed, node=node))
                self._published.add(key)
            elif not vm.running(tick) and key in self._published:
                if self.api.store.get(VMIS, *key) is not None:
                    self.api.store.remove(VMIS, *key)
                uid = vmi_uid(seed, vm)  # the launcher pod, and any a migration started elsewhere
                for pod in self.api.store.list(PODS, vm.namespace):
                    if (pod["metadata"].get("labels") or {}).get(CREATED_BY_LABEL) == uid:
                        self.api.pods.delete(vm.namespace, pod["metadata"]["name"], {"gracePeriodSeconds": 0},
                                             dry_run=False)
                self._published.discard(key)
