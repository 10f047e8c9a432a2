"""Discovery for the fake API server: what a real client reads before it makes its first request.

A client that is not hand-written against the paths (kubectl, client-go's RESTMapper, the dynamic client) first
asks the server what it serves: ``/version``, ``/api`` and ``/apis`` (the group list), then each group version's
resource list. Without those documents ``kubectl get pods`` fails with "Couldn't get current server API group list"
even though ``/api/v1/pods`` answers, so the fake serves discovery derived from the same resource table the
router uses (apiserver_store.RESOURCE_TYPES): a kind added there is discoverable with no second list to keep.

Two formats, chosen by the Accept header as the real server chooses them
(staging/src/k8s.io/apiserver/pkg/endpoints/discovery/aggregated/handler.go):
- aggregated discovery, apidiscovery.k8s.io/v2 ``APIGroupDiscoveryList`` (GA in 1.30): every group, version and
  resource in one answer on ``/api`` and ``/apis``; kubectl 1.37 asks for it first and recognises it by the
  response's Content-Type (client-go discovery/discovery_client.go ContentTypeIsGVK);
- the legacy documents it falls back to: ``APIVersions`` on ``/api``, ``APIGroupList`` on ``/apis``, ``APIGroup``
  on ``/apis/{group}``, ``APIResourceList`` on ``/api/v1`` and ``/apis/{group}/{version}``.
Each resource entry has the fields the apiserver's installer writes (endpoints/installer.go, and
ConvertGroupVersionIntoToDiscovery for the aggregated form): verbs, kind, namespaced/scope, singular and short
names, categories, and subresources with their own group/version/kind, so ``pods/eviction`` names policy/v1
Eviction, which is how ``kubectl drain`` decides to evict rather than delete (kubectl pkg/drain
CheckEvictionSupport).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from watchdog.testbed.cluster.apiserver_store import NODES, PODS, RESOURCE_TYPES, ApiError, ResourceType

KUBERNETES_VERSION = ("1", "37", "v1.37.1+gpu-watchdog.fake")
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
_KUBE_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")
# What apiserver_rest serves for every resource (no deletecollection).
VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")

# Short names and categories as the registries declare them (ShortNames()/Categories() in pkg/registry/*/storage);
# resources not listed have none. Keyed by (group, plural) so a kind another module adds finds its entry here.
SHORT_NAMES: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "pods"): ("po",), ("", "nodes"): ("no",), ("", "events"): ("ev",), ("", "configmaps"): ("cm",),
    ("", "resourcequotas"): ("quota",), ("", "namespaces"): ("ns",), ("", "services"): ("svc",),
    ("", "serviceaccounts"): ("sa",), ("", "endpoints"): ("ep",), ("", "persistentvolumeclaims"): ("pvc",),
    ("", "persistentvolumes"): ("pv",), ("events.k8s.io", "events"): ("ev",),
    ("policy", "poddisruptionbudgets"): ("pdb",), ("scheduling.k8s.io", "priorityclasses"): ("pc",),
    ("networking.k8s.io", "networkpolicies"): ("netpol",), ("storage.k8s.io", "storageclasses"): ("sc",),
    ("apps", "daemonsets"): ("ds",), ("apps", "deployments"): ("deploy",), ("apps", "replicasets"): ("rs",),
    ("apps", "statefulsets"): ("sts",),
    # KubeVirt's CRDs (pkg/virt-operator/resource/generate/components/crds.go): vmi/vmis, vmim/vmims.
    ("kubevirt.io", "virtualmachineinstances"): ("vmi", "vmis"),
    ("kubevirt.io", "virtualmachineinstancemigrations"): ("vmim", "vmims"), ("kubevirt.io", "kubevirts"): ("kv", "kvs"),
}
CATEGORIES: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "pods"): ("all",), ("", "services"): ("all",), ("kubevirt.io", "virtualmachineinstances"): ("all",),
    ("kubevirt.io", "virtualmachineinstancemigrations"): ("all",)}


@dataclass(frozen=True, slots=True)
class Subresource:
    """A subresource apiserver_rest serves, as discovery names it."""

    name: str
    group: str
    version: str
    kind: str
    verbs: tuple[str, ...]


# Only what the router implements: eviction (apiserver_pods.evict) and the status subresources (apiserver_rest).
SUBRESOURCES: dict[ResourceType, tuple[Subresource, ...]] = {
    PODS: (Subresource("eviction", "policy", "v1", "Eviction", ("create",)),
           Subresource("status", "", "v1", "Pod", ("get", "patch", "update"))),
    NODES: (Subresource("status", "", "v1", "Node", ("get", "patch", "update")),),
}


def group_of(resource: ResourceType) -> str:
    return resource.api_version.rpartition("/")[0]


def version_of(resource: ResourceType) -> str:
    return resource.api_version.rpartition("/")[2]


def _version_priority(version: str) -> tuple[int, int, int]:
    """apimachinery/pkg/version/helpers.go CompareKubeAwareVersionStrings: GA before beta before alpha, then the
    higher number first (as a sort key: the preferred version sorts first)."""
    match = _KUBE_VERSION.match(version)
    if match is None:
        return (3, 0, 0)
    major, stage, minor = match.groups()
    return ({None: 0, "beta": 1, "alpha": 2}[stage], -int(major), -int(minor or 0))


def groups() -> dict[str, list[str]]:
    """Named groups (not the core one) in first-seen order, each with its versions, preferred first."""
    found: dict[str, list[str]] = {}
    for resource in RESOURCE_TYPES:
        group = group_of(resource)
        if group and version_of(resource) not in found.setdefault(group, []):
            found[group].append(version_of(resource))
    return {group: sorted(versions, key=_version_priority) for group, versions in found.items()}


def _resources(group: str, version: str) -> list[ResourceType]:
    return [r for r in RESOURCE_TYPES if (group_of(r), version_of(r)) == (group, version)]


def _legacy_resource(resource: ResourceType) -> list[dict[str, Any]]:
    key = (group_of(resource), resource.plural)
    entry: dict[str, Any] = {"name": resource.plural, "singularName": resource.kind.lower(),
                             "namespaced": resource.namespaced, "kind": resource.kind, "verbs": list(VERBS)}
    if key in SHORT_NAMES:
        entry["shortNames"] = list(SHORT_NAMES[key])
    if key in CATEGORIES:
        entry["categories"] = list(CATEGORIES[key])
    entries = [entry]
    for sub in SUBRESOURCES.get(resource, ()):
        sub_entry = {"name": f"{resource.plural}/{sub.name}", "singularName": "", "namespaced": resource.namespaced,
                     "kind": sub.kind, "verbs": list(sub.verbs)}
        if (sub.group, sub.version) != (group_of(resource), version_of(resource)):
            sub_entry.update(group=sub.group, version=sub.version)  # as the installer marks pods/eviction
        entries.append(sub_entry)
    return entries


def resource_list(group: str, version: str) -> dict[str, Any]:
    """The legacy APIResourceList of ``/api/v1`` or ``/apis/{group}/{version}``."""
    resources = _resources(group, version)
    if not resources:
        raise ApiError(404, "the server could not find the requested resource")
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}".lstrip("/"),
            "resources": [entry for r in resources for entry in _legacy_resource(r)]}


def _group_document(name: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def _aggregated_resource(resource: ResourceType) -> dict[str, Any]:
    key = (group_of(resource), resource.plural)
    # responseKind carries the group/version only when it differs from the resource's own, as the installer's
    # APIResource does (installer.go ConvertGroupVersionIntoToDiscovery copies r.Group/r.Version).
    entry: dict[str, Any] = {
        "resource": resource.plural, "responseKind": {"group": "", "version": "", "kind": resource.kind},
        "scope": "Namespaced" if resource.namespaced else "Cluster", "singularResource": resource.kind.lower(),
        "verbs": list(VERBS),
    }
    if key in SHORT_NAMES:
        entry["shortNames"] = list(SHORT_NAMES[key])
    if key in CATEGORIES:
        entry["categories"] = list(CATEGORIES[key])
    subresources = []
    for sub in SUBRESOURCES.get(resource, ()):
        same = (sub.group, sub.version) == (group_of(resource), version_of(resource))
        subresources.append({"subresource": sub.name, "verbs": list(sub.verbs), "responseKind": {
            "group": "" if same else sub.group, "version": "" if same else sub.version, "kind": sub.kind}})
    if subresources:
        entry["subresources"] = subresources
    return entry


def _aggregated_group(name: str, versions: list[str]) -> dict[str, Any]:
    return {"metadata": {"name": name} if name else {}, "versions": [
        {"version": v, "resources": [_aggregated_resource(r) for r in _resources(name, v)], "freshness": "Current"}
        for v in versions]}


def _aggregated(items: list[dict[str, Any]]) -> web.Response:
    body = {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items}
    # Bytes, not text: aiohttp would append "; charset=utf-8" to the media type the client matches on.
    return web.Response(body=json.dumps(body).encode(), headers={"Content-Type": AGGREGATED, "Vary": "Accept"})


def accepted(request: web.Request, offers: list[dict[str, str]]) -> dict[str, str] | None:
    """The first media type in the Accept header that one of ``offers`` (parameter sets over application/json)
    satisfies, in the client's order; None when nothing fits. An absent Accept header means plain JSON."""
    header = request.headers.get("Accept") or "application/json"
    for clause in header.split(","):
        base, *params = (part.strip() for part in clause.split(";"))
        if base not in ("application/json", "application/*", "*/*"):
            continue
        wanted = dict(p.split("=", 1) for p in params if "=" in p and not p.startswith("q="))
        wanted.pop("charset", None)
        for offer in offers:
            if offer == wanted:
                return offer
    return None


SERVE_AGGREGATED = web.AppKey("serve_aggregated_discovery", bool)  # False: answer as a server before 1.26 did
_AGGREGATED_OFFER = {"g": "apidiscovery.k8s.io", "v": "v2", "as": "APIGroupDiscoveryList"}


def _wants_aggregated(request: web.Request) -> bool:
    offers = [_AGGREGATED_OFFER, {}] if request.app.get(SERVE_AGGREGATED, True) else [{}]
    choice = accepted(request, offers)
    if choice is None:
        raise ApiError(406, f"only the following media types are accepted: application/json, {AGGREGATED}",
                       reason="NotAcceptable")
    return choice is _AGGREGATED_OFFER


async def version(request: web.Request) -> web.Response:
    """``/version``: the version.Info a real server reports (staging/src/k8s.io/apimachinery/pkg/version)."""
    major, minor, git = KUBERNETES_VERSION
    return web.json_response({"major": major, "minor": minor, "emulationMajor": major, "emulationMinor": minor,
                              "gitVersion": git, "gitCommit": "", "gitTreeState": "clean",
                              "buildDate": "2026-12-01T00:00:00Z", "goVersion": "python", "compiler": "aiohttp",
                              "platform": "linux/amd64"})


async def core_versions(request: web.Request) -> web.Response:
    if _wants_aggregated(request):
        return _aggregated([_aggregated_group("", ["v1"])])
    host = request.host or "127.0.0.1"
    return web.json_response({"kind": "APIVersions", "versions": ["v1"],
                              "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}]})


async def core_resources(request: web.Request) -> web.Response:
    return web.json_response(resource_list("", "v1"))


async def group_list(request: web.Request) -> web.Response:
    if _wants_aggregated(request):
        return _aggregated([_aggregated_group(name, versions) for name, versions in groups().items()])
    return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        _group_document(name, versions) for name, versions in groups().items()]})


async def group(request: web.Request) -> web.Response:
    name = request.match_info["group"]
    versions = groups().get(name)
    if versions is None:
        raise ApiError(404, "the server could not find the requested resource")
    return web.json_response({"kind": "APIGroup", "apiVersion": "v1", **_group_document(name, versions)})


async def group_resources(request: web.Request) -> web.Response:
    return web.json_response(resource_list(request.match_info["group"], request.match_info["version"]))


def add_routes(router: web.UrlDispatcher) -> None:
    """Register the discovery paths; call before the catch-all resource route."""
    router.add_get("/version", version)
    router.add_get("/api", core_versions)
    router.add_get("/api/v1", core_resources)
    router.add_get("/apis", group_list)
    router.add_get("/apis/{group}", group)
    router.add_get("/apis/{group}/{version}", group_resources)
