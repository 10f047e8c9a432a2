"""KubeVirt's answer to a virt-launcher pod's eviction, inside the fake API server: virt-api's admission webhook,
then virt-controller's evacuation controller moving the VM to another node.

An evicting agent is only right about VMs if it reads these answers right, and no KubeVirt runs here, so they are
emulated after the public sources:
- the webhook "virt-launcher-eviction-interceptor.kubevirt.io" (kubevirt/kubevirt
  pkg/virt-api/webhooks/validating-webhook/admitters/pod-eviction-admitter.go; docs/handling-eviction-requests.md)
  runs before the PodDisruptionBudget check. It passes pods that are not running VMs (label
  ``kubevirt.io: virt-launcher``, not completed, VMI named by the annotation ``kubevirt.io/domain``). The strategy
  is the VMI's spec.evictionStrategy, else the KubeVirt CR's spec.configuration.evictionStrategy; none or "None"
  passes (the pod goes and the VM stops). LiveMigrate on a VM that is not live-migratable is refused; otherwise
  LiveMigrate, LiveMigrateIfPossible on a migratable VM and External mark the VMI (status.evacuationNodeName; not
  in a dry run) and refuse the eviction, saying so. Every refusal is a 429 whose message the API server prefixes
  'admission webhook "<name>" denied the request: ' (apiserver webhook errors ToStatusErr).
- the evacuation controller (docs/handling-eviction-requests.md, "Evacuation Controller") creates a
  VirtualMachineInstanceMigration (generateName ``kubevirt-evacuation-``, spec.vmiName, label
  ``kubevirt.io/vmi-name``) for a marked VMI; the migration goes Pending → Running → Succeeded and the VMI's
  status.migrationState records it. Here each step happens on ``advance()`` (the test bed calls it once a tick) or
  all at once on ``finish()``; on success the VMI runs on the target node, the source launcher pod has Succeeded and
  a target launcher pod runs, and ``on_migrated`` callbacks learn it (the simulated GPU stops serving the VM).
Not modelled: the PDB KubeVirt keeps on a LiveMigrate launcher, migration policies, failed migrations, and the
External strategy's outside controller (an External VMI stays marked).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

from watchdog.testbed.cluster.apiserver_store import (KUBEVIRTS, NODES, PODS, VMI_MIGRATIONS, VMIS, ApiError,
                                                      Store, rfc3339)

WEBHOOK = "virt-launcher-eviction-interceptor.kubevirt.io"
DOMAIN_ANNOTATION = "kubevirt.io/domain"  # virtv1.DomainAnnotation: the VMI's name on its launcher pod
VMI_NAME_LABEL = "kubevirt.io/vmi-name"  # on the evacuation's VirtualMachineInstanceMigration
NODE_NAME_LABEL = "kubevirt.io/nodeName"
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # generated name suffixes (apimachinery/pkg/util/rand)


def denied(message: str) -> ApiError:
    """The webhook's denied(): code 429, as the API server returns it to the client."""
    return ApiError(429, f'admission webhook "{WEBHOOK}" denied the request: {message}', reason="TooManyRequests")


@dataclass(slots=True)
class _Migration:
    namespace: str
    name: str  # the VirtualMachineInstanceMigration's
    vmi: str
    source: str


class KubevirtEvacuations:
    """The webhook (``admit``, called by the eviction subresource) and the evacuation controller (``advance``)."""

    def __init__(self, store: Store, *, seed: int = 0) -> None:
        self.store = store
        self.target_node: str | None = None  # None: another Node of the store, else "<source>-migration-target"
        self.on_migrated: list[Callable[[str, str, str, str], None]] = []  # (namespace, vmi, source, target)
        self._active: list[_Migration] = []
        self._random = random.Random(seed)

    # ------------------------------------------------------------------ the admission webhook
    def admit(self, pod: dict[str, Any], *, dry_run: bool) -> None:
        """Raise the webhook's 429 denial, or return when the eviction may go on to the PDB check."""
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if (meta.get("labels") or {}).get("kubevirt.io") != "virt-launcher":
            return
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        name = (meta.get("annotations") or {}).get(DOMAIN_ANNOTATION)
        if not name:
            return
        namespace = meta.get("namespace", "")
        vmi = self.store.get(VMIS, namespace, name)
        if vmi is None:
            raise denied(f'kubevirt failed getting the vmi: virtualmachineinstances.kubevirt.io "{name}" not found')
        strategy = (vmi.get("spec") or {}).get("evictionStrategy") or self._cluster_strategy()
        migratable = _condition(vmi, "LiveMigratable")
        if strategy == "LiveMigrate" and not migratable:
            raise denied(f"VMI {name} is configured with an eviction strategy but is not live-migratable")
        if not (strategy in ("LiveMigrate", "External") or (strategy == "LiveMigrateIfPossible" and migratable)):
            return  # None, unset, or LiveMigrateIfPossible on a VM that cannot migrate: the pod goes, the VM stops
        status = vmi.setdefault("status", {})
        if status.get("evacuationNodeName"):  # checked before the node, as admitLauncherPod does
            raise denied(f'Evacuation in progress: Eviction triggered evacuation of VMI "{namespace}/{name}"')
        if status.get("nodeName") != spec.get("nodeName"):
            raise denied("Eviction request for target Pod")
        if not dry_run:
            status["evacuationNodeName"] = status.get("nodeName", "")
            self.store.update(VMIS, vmi)
            if strategy != "External":
                self._create_migration(namespace, name, source=status["evacuationNodeName"])
        raise denied(f'Eviction triggered evacuation of VMI "{namespace}/{name}"')

    def _cluster_strategy(self) -> str:
        for kubevirt in self.store.list(KUBEVIRTS):
            strategy = ((kubevirt.get("spec") or {}).get("configuration") or {}).get("evictionStrategy")
            if strategy:
                return str(strategy)
        return ""

    # ------------------------------------------------------------------ the evacuation controller
    def _create_migration(self, namespace: str, vmi: str, *, source: str) -> None:
        name = "kubevirt-evacuation-" + "".join(self._random.choice(_ALPHABET) for _ in range(5))
        self.store.create(VMI_MIGRATIONS, {
            "metadata": {"name": name, "generateName": "kubevirt-evacuation-", "namespace": namespace,
                         "labels": {VMI_NAME_LABEL: vmi}},
            "spec": {"vmiName": vmi}, "status": {"phase": "Pending"}})
        self._active.append(_Migration(namespace, name, vmi, source))

    @property
    def active(self) -> int:
        """Migrations not finished yet."""
        return len(self._active)

    def advance(self) -> None:
        """One step of every migration under way: Pending → Running → Succeeded."""
        for migration in list(self._active):
            vmim = self.store.get(VMI_MIGRATIONS, migration.namespace, migration.name)
            vmi = self.store.get(VMIS, migration.namespace, migration.vmi)
            if vmim is None or vmi is None:  # deleted meanwhile: nothing left to move
                self._active.remove(migration)
                continue
            if vmim["status"].get("phase") == "Pending":
                self._start(migration, vmim, vmi)
            else:
                self._succeed(migration, vmim, vmi)
                self._active.remove(migration)

    def finish(self) -> int:
        """Run every migration under way to its end; returns how many ended."""
        count = len(self._active)
        while self._active:
            self.advance()
        return count

    def _target(self, source: str) -> str:
        if self.target_node:
            return self.target_node
        others = [n["metadata"]["name"] for n in self.store.list(NODES) if n["metadata"]["name"] != source]
        return others[0] if others else f"{source}-migration-target"

    def _start(self, migration: _Migration, vmim: dict[str, Any], vmi: dict[str, Any]) -> None:
        now = rfc3339(self.store.clock())
        vmim["status"] = {"phase": "Running"}
        self.store.update(VMI_MIGRATIONS, vmim)
        vmi["status"]["migrationState"] = {"startTimestamp": now, "sourceNode": migration.source,
                                           "targetNode": self._target(migration.source),
                                           "migrationUid": vmim["metadata"]["uid"]}
        self.store.update(VMIS, vmi)

    def _succeed(self, migration: _Migration, vmim: dict[str, Any], vmi: dict[str, Any]) -> None:
        now = rfc3339(self.store.clock())
        status = vmi["status"]
        target = status["migrationState"]["targetNode"]
        status["migrationState"].update(endTimestamp=now, completed=True)
        status["nodeName"] = target
        status.pop("evacuationNodeName", None)
        vmi["metadata"].setdefault("labels", {})[NODE_NAME_LABEL] = target
        self.store.update(VMIS, vmi)
        self._move_launcher(migration, vmi, target)
        vmim["status"] = {"phase": "Succeeded"}
        self.store.update(VMI_MIGRATIONS, vmim)
        for callback in self.on_migrated:
            callback(migration.namespace, migration.vmi, migration.source, target)

    def _move_launcher(self, migration: _Migration, vmi: dict[str, Any], target: str) -> None:
        """The source virt-launcher pod completes; a target pod of the same VMI runs on the target node."""
        uid = vmi["metadata"].get("uid")
        for pod in self.store.list(PODS, migration.namespace):
            labels = pod["metadata"].get("labels") or {}
            if labels.get("kubevirt.io/created-by") != uid or pod["spec"].get("nodeName") != migration.source:
                continue
            if pod["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            replacement = {"metadata": {key: value for key, value in pod["metadata"].items()
                                        if key in ("namespace", "labels", "annotations", "ownerReferences")},
                           "spec": {**pod["spec"], "nodeName": target}, "status": dict(pod["status"])}
            suffix = "".join(self._random.choice(_ALPHABET) for _ in range(5))
            replacement["metadata"]["name"] = f"virt-launcher-{migration.vmi}-{suffix}"
            pod["status"]["phase"] = "Succeeded"
            for container in pod["status"].get("containerStatuses") or ():
                container.update(ready=False, started=False,
                                 state={"terminated": {"exitCode": 0, "reason": "Completed"}})
            self.store.update(PODS, pod)
            self.store.create(PODS, replacement)


def _condition(obj: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and str(c.get("status")) == "True"
               for c in (obj.get("status") or {}).get("conditions") or ())
