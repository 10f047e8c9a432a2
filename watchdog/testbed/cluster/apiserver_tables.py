"""Server-side printing for the fake API server: ``meta.k8s.io/v1`` Tables, the rows ``kubectl get`` shows.

kubectl does not format pods itself: it asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` and
prints the columns the server computed (kubectl pkg/cmd/get/get.go transformRequests). A server that answers with
a plain list gets only NAME and AGE, so a person exploring the demo would not see a pod's STATUS, a PDB's ALLOWED
DISRUPTIONS or an Event's REASON. The columns and cells here follow pkg/printers/internalversion/printers.go for
the kinds the fake serves (pods, nodes, events, PDBs, ConfigMaps, Leases, PriorityClasses, and what the isolation
audit reads: Namespaces, ResourceQuotas, NetworkPolicies, PersistentVolumeClaims, StorageClasses) and, for
KubeVirt's VMIs and migrations, their CRDs' printer columns; any other kind
gets the generic Name / Created At table (staging/src/k8s.io/apiserver/pkg/registry/rest/table.go). Cells are computed
as the server does with every column, priority-1 ones included (printers/storage/storage.go asks for Wide), and
kubectl hides those unless ``-o wide``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from aiohttp import web

from watchdog.testbed.cluster.apiserver_discovery import accepted
from watchdog.testbed.cluster.apiserver_store import ApiError, ResourceType

TABLE_OFFERS = [{"as": "Table", "v": "v1", "g": "meta.k8s.io"}, {"as": "Table", "v": "v1beta1", "g": "meta.k8s.io"}]


def _column(name: str, description: str, *, kind: str = "string", priority: int = 0, fmt: str = "") -> dict:
    return {"name": name, "type": kind, "format": fmt, "description": description, "priority": priority}


_NAME = _column("Name", "Name must be unique within a namespace.", fmt="name")
_AGE = _column("Age", "CreationTimestamp is a timestamp representing the server time when this object was created.")


def human_duration(seconds: float) -> str:
    """apimachinery/pkg/util/duration/duration.go HumanDuration, the AGE column's wording."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    years, days = hours // 24 // 365, hours // 24 % 365
    if hours < 24 * 365 * 8:
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{years}y"


def _since(timestamp: str | None, now: float) -> str:
    """translateTimestampSince: "<unknown>" for a zero time."""
    if not timestamp:
        return "<unknown>"
    return human_duration(now - datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp())


def _pod(pod: dict, now: float) -> list:
    """printPod: READY counts ready containers, STATUS is the phase refined by the pod's and its containers'
    reasons, and "Terminating" once a deletion started."""
    status, spec = pod.get("status") or {}, pod.get("spec") or {}
    containers = status.get("containerStatuses") or []
    reason = status.get("reason") or status.get("phase") or ""
    for container in containers:
        state = container.get("state") or {}
        waiting, terminated = state.get("waiting") or {}, state.get("terminated") or {}
        reason = waiting.get("reason") or terminated.get("reason") or reason
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    ready = sum(1 for c in containers if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in containers)
    return [pod["metadata"]["name"], f"{ready}/{len(spec.get('containers') or [])}", reason, str(restarts),
            _since(pod["metadata"].get("creationTimestamp"), now), status.get("podIP") or "<none>",
            spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>", "<none>"]


def _node(node: dict, now: float) -> list:
    """printNode: STATUS from the Ready condition, ",SchedulingDisabled" when cordoned; ROLES from the
    node-role.kubernetes.io/<role> labels."""
    status = node.get("status") or {}
    ready = [c.get("status") for c in status.get("conditions") or () if c.get("type") == "Ready"]
    text = {"True": "Ready", "False": "NotReady"}.get(ready[0], "Unknown") if ready else "Unknown"
    if (node.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    labels = node["metadata"].get("labels") or {}
    role = "node-role.kubernetes.io/"
    roles = sorted(key.removeprefix(role) for key in labels if key.startswith(role))
    info = status.get("nodeInfo") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or ()}
    return [node["metadata"]["name"], text, ",".join(roles) or "<none>",
            _since(node["metadata"].get("creationTimestamp"), now), info.get("kubeletVersion", ""),
            addresses.get("InternalIP", "<none>"), addresses.get("ExternalIP", "<none>"),
            info.get("osImage", "<unknown>"), info.get("kernelVersion", "<unknown>"),
            info.get("containerRuntimeVersion", "<unknown>")]


def _event(event: dict, now: float) -> list:
    """printEvent, for core/v1 Events and (through their regarding/note/… fields) events.k8s.io/v1 ones."""
    involved = event.get("involvedObject") or event.get("regarding") or {}
    first = _since(event.get("firstTimestamp") or event.get("deprecatedFirstTimestamp") or event.get("eventTime"), now)
    last = _since(event.get("lastTimestamp") or event.get("deprecatedLastTimestamp"), now) if (
        event.get("lastTimestamp") or event.get("deprecatedLastTimestamp")) else first
    count = event.get("count") or event.get("deprecatedCount") or 1
    if event.get("series"):
        last, count = _since(event["series"].get("lastObservedTime"), now), event["series"].get("count", count)
    kind = (involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = event.get("source") or event.get("deprecatedSource") or {}
    origin = source.get("component") or event.get("reportingController") or event.get("reportingComponent") or ""
    if source.get("host"):
        origin += f", {source['host']}"
    return [last, event.get("type", ""), event.get("reason", ""), target, involved.get("fieldPath", ""), origin,
            (event.get("message") or event.get("note") or "").strip(), first, int(count), event["metadata"]["name"]]


def _pdb(pdb: dict, now: float) -> list:
    spec = pdb.get("spec") or {}
    return [pdb["metadata"]["name"], str(spec.get("minAvailable", "N/A")), str(spec.get("maxUnavailable", "N/A")),
            int((pdb.get("status") or {}).get("disruptionsAllowed", 0)),
            _since(pdb["metadata"].get("creationTimestamp"), now)]


def _age_only(extra: Callable[[dict], list]) -> Callable[[dict, float], list]:
    return lambda obj, now: [obj["metadata"]["name"], *extra(obj),
                             _since(obj["metadata"].get("creationTimestamp"), now)]


_PRINTERS: dict[str, tuple[list[dict], Callable[[dict, float], list]]] = {
    "Pod": ([_NAME, _column("Ready", "The aggregate readiness state of this pod for accepting traffic."),
             _column("Status", "The aggregate status of the containers in this pod."),
             _column("Restarts", "The number of times the containers in this pod have been restarted."), _AGE,
             _column("IP", "podIP", priority=1), _column("Node", "nodeName", priority=1),
             _column("Nominated Node", "nominatedNodeName", priority=1),
             _column("Readiness Gates", "readinessGates", priority=1)], _pod),
    "Node": ([_NAME, _column("Status", "The status of the node"), _column("Roles", "The roles of the node"), _AGE,
              _column("Version", "Kubelet Version reported by the node."),
              *(_column(name, name, priority=1) for name in ("Internal-IP", "External-IP", "OS-Image",
                                                             "Kernel-Version", "Container-Runtime"))], _node),
    "Event": ([_column("Last Seen", "lastTimestamp"), _column("Type", "type"), _column("Reason", "reason"),
               _column("Object", "involvedObject"), _column("Subobject", "fieldPath", priority=1),
               _column("Source", "source", priority=1), _column("Message", "message"),
               _column("First Seen", "firstTimestamp", priority=1), _column("Count", "count", priority=1),
               {**_NAME, "priority": 1}], _event),
    "PodDisruptionBudget": ([_NAME, _column("Min Available", "The minimum number of pods that must be available."),
                             _column("Max Unavailable", "The maximum number of pods that may be unavailable."),
                             _column("Allowed Disruptions", "Calculated number of pods that may be disrupted at "
                                     "this time.", kind="integer"), _AGE], _pdb),
    "ConfigMap": ([_NAME, _column("Data", "data", kind="integer"), _AGE],
                  _age_only(lambda cm: [len(cm.get("data") or {}) + len(cm.get("binaryData") or {})])),
    "Lease": ([_NAME, _column("Holder", "holderIdentity"), _AGE],
              _age_only(lambda lease: [(lease.get("spec") or {}).get("holderIdentity") or ""])),
    "PriorityClass": ([_NAME, _column("Value", "value", kind="integer"),
                       _column("Global-Default", "globalDefault", kind="boolean"), _AGE,
                       _column("PreemptionPolicy", "preemptionPolicy")],
                      lambda pc, now: [pc["metadata"]["name"], int(pc.get("value", 0)), bool(pc.get("globalDefault")),
                                       _since(pc["metadata"].get("creationTimestamp"), now),
                                       pc.get("preemptionPolicy", "PreemptLowerPriority")]),
}


def _quota(quota: dict, now: float) -> list:
    """printResourceQuota: ``<key>: <used>/<hard>`` for every key of status.hard, sorted; ``limits.*`` keys in
    the LIMIT column, the others in REQUEST."""
    status = quota.get("status") or {}
    hard, used = status.get("hard") or {}, status.get("used") or {}
    columns: dict[bool, list[str]] = {False: [], True: []}
    for key in sorted(hard):
        columns[key.split(".")[0] == "limits" and "." in key].append(f"{key}: {used.get(key, '0')}/{hard[key]}")
    return [quota["metadata"]["name"], _since(quota["metadata"].get("creationTimestamp"), now),
            ", ".join(columns[False]), ", ".join(columns[True])]


def label_selector_text(selector: dict) -> str:
    """metav1.FormatLabelSelector: "<none>" for an empty selector, else its requirements sorted by key."""
    parts = [(key, f"{key}={value}") for key, value in (selector.get("matchLabels") or {}).items()]
    for expression in selector.get("matchExpressions") or ():
        key, operator, values = expression.get("key", ""), expression.get("operator", ""), expression.get("values")
        text = {"In": f"{key} in ({','.join(sorted(values or []))})",
                "NotIn": f"{key} notin ({','.join(sorted(values or []))})",
                "Exists": key, "DoesNotExist": f"!{key}"}.get(operator, f"{key} {operator}")
        parts.append((key, text))
    return ",".join(text for _, text in sorted(parts)) or "<none>"


_ACCESS_MODES = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}


def _claim(claim: dict, now: float) -> list:
    """printPersistentVolumeClaim: capacity and access modes are the bound volume's, shown once bound."""
    spec, status = claim.get("spec") or {}, claim.get("status") or {}
    phase = "Terminating" if claim["metadata"].get("deletionTimestamp") else status.get("phase", "")
    bound = bool(spec.get("volumeName"))
    modes = ",".join(short for mode, short in _ACCESS_MODES.items() if mode in (status.get("accessModes") or ()))
    return [claim["metadata"]["name"], phase, spec.get("volumeName", ""),
            (status.get("capacity") or {}).get("storage", "") if bound else "", modes if bound else "",
            spec.get("storageClassName") or "", spec.get("volumeAttributesClassName") or "<unset>",
            _since(claim["metadata"].get("creationTimestamp"), now), spec.get("volumeMode") or "<unset>"]


def _storage_class(storage_class: dict, now: float) -> list:
    """printStorageClass: "(default)" after the default class's name; the API's defaults for unset fields."""
    meta = storage_class["metadata"]
    default = (meta.get("annotations") or {}).get("storageclass.kubernetes.io/is-default-class") == "true"
    return [meta["name"] + (" (default)" if default else ""), storage_class.get("provisioner", ""),
            storage_class.get("reclaimPolicy") or "Delete", storage_class.get("volumeBindingMode") or "Immediate",
            bool(storage_class.get("allowVolumeExpansion")), _since(meta.get("creationTimestamp"), now)]


_PRINTERS.update({
    "Namespace": ([_NAME, _column("Status", "The status of the namespace"), _AGE],
                  _age_only(lambda ns: [(ns.get("status") or {}).get("phase", "")])),
    "ResourceQuota": ([_NAME, _AGE, _column("Request", "Request represents a minimum amount of cpu/memory that a "
                                                       "container may consume."),
                       _column("Limit", "Limits control the maximum amount of cpu/memory that a container may use "
                                        "independent of contention on the node.")], _quota),
    "NetworkPolicy": ([_NAME, _column("Pod-Selector", "podSelector"), _AGE],
                      _age_only(lambda policy: [label_selector_text((policy.get("spec") or {}).get("podSelector")
                                                                    or {})])),
    "PersistentVolumeClaim": ([_NAME, *(_column(name, name) for name in (
        "Status", "Volume", "Capacity", "Access Modes", "StorageClass", "VolumeAttributesClass")), _AGE,
        _column("VolumeMode", "volumeMode", priority=1)], _claim),
    "StorageClass": ([_NAME, *(_column(name, name) for name in ("Provisioner", "ReclaimPolicy",
                                                                "VolumeBindingMode")),
                      _column("AllowVolumeExpansion", "allowVolumeExpansion", kind="boolean"), _AGE],
                     _storage_class),
})


def _vmi(vmi: dict, now: float) -> list:
    """The VirtualMachineInstance CRD's additionalPrinterColumns (kubevirt/kubevirt
    pkg/virt-operator/resource/generate/components/crds.go NewVirtualMachineInstanceCrd): IP is the first
    interface's; READY, LIVE-MIGRATABLE and PAUSED are those conditions' status. A CRD's table starts with Name
    (apiextensions-apiserver tableconvertor)."""
    status = vmi.get("status") or {}
    interfaces = status.get("interfaces") or [{}]
    conditions = {c.get("type"): c.get("status", "") for c in status.get("conditions") or ()}
    return [vmi["metadata"]["name"], _since(vmi["metadata"].get("creationTimestamp"), now), status.get("phase", ""),
            interfaces[0].get("ipAddress", ""), status.get("nodeName", ""), conditions.get("Ready", ""),
            conditions.get("LiveMigratable", ""), conditions.get("Paused", "")]


_PRINTERS.update({
    "VirtualMachineInstance": ([_NAME, _AGE, *(_column(name, name) for name in ("Phase", "IP", "NodeName", "Ready")),
                                _column("Live-Migratable", "LiveMigratable", priority=1),
                                _column("Paused", "Paused", priority=1)], _vmi),
    # NewVirtualMachineInstanceMigrationCrd: Phase and VMI only (a CRD with printer columns gets no Age of its own).
    "VirtualMachineInstanceMigration": (
        [_NAME, _column("Phase", "The current phase of VM instance migration"),
         _column("VMI", "The name of the VMI to perform the migration on")],
        lambda m, now: [m["metadata"]["name"], (m.get("status") or {}).get("phase", ""),
                        (m.get("spec") or {}).get("vmiName", "")]),
})
# rest/table.go DefaultTableConvertor: every other kind.
_DEFAULT = ([_NAME, _column("Created At", "creationTimestamp", kind="date")],
            lambda obj, now: [obj["metadata"]["name"], obj["metadata"].get("creationTimestamp", "")])


def table(resource: ResourceType, objects: list[dict[str, Any]], *, now: float, include_object: str = "Metadata",
          resource_version: str | None = None, headers: bool = True, version: str = "v1") -> dict[str, Any]:
    """A Table of ``objects``; ``include_object`` is the request's includeObject (None, Metadata or Object)."""
    if include_object not in ("None", "Metadata", "Object"):
        raise ApiError(400, f'includeObject: Unsupported value: "{include_object}": supported values: '
                            '"Metadata", "None", "Object"')
    columns, printer = _PRINTERS.get(resource.kind, _DEFAULT)
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": printer(obj, now)}
        if include_object == "Object":
            row["object"] = obj
        elif include_object == "Metadata":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": f"meta.k8s.io/{version}",
                             "metadata": obj["metadata"]}
        rows.append(row)
    return {"kind": "Table", "apiVersion": f"meta.k8s.io/{version}",
            "metadata": {"resourceVersion": resource_version} if resource_version else {},
            "columnDefinitions": columns if headers else [], "rows": rows}


def printer_for(request: web.Request, resource: ResourceType, *,
                clock: Callable[[], float]) -> Callable[..., dict] | None:
    """How to answer a read: None for JSON objects, or a function making a Table when the Accept header asks
    for one first (kubectl's human-readable output), with the request's includeObject."""
    choice = accepted(request, [*TABLE_OFFERS, {}])
    if choice is None:
        raise ApiError(406, "only the following media types are accepted: application/json, "
                            "application/json;as=Table;v=v1;g=meta.k8s.io", reason="NotAcceptable")
    if not choice:
        return None
    include = request.query.get("includeObject") or "Metadata"
    table(resource, [], now=0.0, include_object=include)  # refuses a bad includeObject before any output

    def printer(objects: list[dict], *, resource_version: str | None = None, headers: bool = True) -> dict:
        return table(resource, objects, now=clock(), include_object=include, resource_version=resource_version,
                     headers=headers, version=choice["v"])

    return printer
