"""REST routing and the generic verbs (list, watch, get, create, update, patch, delete) of the fake API server.

One dispatcher maps ``/api/v1/...`` and ``/apis/<group>/<version>/...`` paths onto the resource table, so every
resource gets the same semantics the real generic registry gives (staging/src/k8s.io/apiserver/pkg/registry/
generic/registry/store.go): 409 AlreadyExists on a duplicate create, 404 NotFound, 409 Conflict when an update's
metadata.resourceVersion is not the stored one (optimistic concurrency, which leader election relies on), and a
list whose metadata.resourceVersion is the revision to watch from. Validation beyond that is per resource and cites
its source where it is done.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from aiohttp import web

from watchdog.testbed.cluster.apiserver_bodies import check_patch_type, merge_patch, read_body
from watchdog.testbed.cluster.apiserver_discovery import SUBRESOURCES
from watchdog.testbed.cluster.apiserver_pdb import validate_pdb_spec
from watchdog.testbed.cluster.apiserver_pods import PodLogic, dry_run_of
from watchdog.testbed.cluster.apiserver_selectors import (SelectorError, fields_match, labels_match, parse_field_selector,
                                                parse_label_selector)
from watchdog.testbed.cluster.apiserver_store import (EVENTS, EVENTS_V1, LEASES, PDBS, PODS, RESOURCE_TYPES, ApiError,
                                            ResourceType, Store, not_found, status_body)
from watchdog.testbed.cluster.apiserver_tables import printer_for
from watchdog.testbed.cluster.apiserver_watch import serve_watch, watch_list_options

_BY_PATH = {(r.prefix, r.plural): r for r in RESOURCE_TYPES}
_MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$")
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def _check_time(value: Any, field: str, *, micro: bool) -> None:
    """metav1.Time/MicroTime UnmarshalJSON: RFC 3339 with a zone; MicroTime needs exactly 6 fraction digits
    (layout "2006-01-02T15:04:05.000000Z07:00" in apimachinery/pkg/apis/meta/v1/micro_time.go). A naive
    Python datetime's isoformat has no zone and is refused with 400, as the real decoder refuses it."""
    if value is None:
        return
    if not isinstance(value, str) or not (_MICRO_TIME if micro else _TIME).match(value):
        raise ApiError(400, f'{field}: parsing time "{value}" as RFC 3339{" (MicroTime)" if micro else ""} failed')


def _validate(resource: ResourceType, obj: dict[str, Any], namespace: str) -> None:
    name = obj["metadata"].get("name", "")
    if resource is EVENTS:
        for field in ("firstTimestamp", "lastTimestamp"):
            _check_time(obj.get(field), field, micro=False)
        _check_time(obj.get("eventTime"), "eventTime", micro=True)
        involved_ns = (obj.get("involvedObject") or {}).get("namespace")
        if involved_ns and involved_ns != namespace:
            # pkg/apis/core/validation/events.go legacyValidateEvent
            raise ApiError(422, f'Event "{name}" is invalid: involvedObject.namespace: Invalid value: '
                                f'"{involved_ns}": does not match event.namespace', reason="Invalid")
    elif resource is EVENTS_V1:
        _check_time(obj.get("eventTime"), "eventTime", micro=True)
        missing = [f for f in ("eventTime", "reportingController", "reportingInstance", "action", "reason")
                   if not obj.get(f)]
        if missing or len(obj.get("note") or "") > 1024:
            # pkg/apis/core/validation/events.go ValidateEventCreate for events.k8s.io/v1
            problem = f"{missing[0]}: Required value" if missing else "note: Too long: must have at most 1024 bytes"
            raise ApiError(422, f'Event.events.k8s.io "{name}" is invalid: {problem}', reason="Invalid")
    elif resource is LEASES:
        spec = obj.get("spec") or {}
        for field in ("acquireTime", "renewTime"):
            _check_time(spec.get(field), f"spec.{field}", micro=True)
    elif resource is PDBS and (problem := validate_pdb_spec(obj.get("spec") or {})):
        raise ApiError(422, f'PodDisruptionBudget.policy "{name}" is invalid: {problem}', reason="Invalid")


class Rest:
    def __init__(self, store: Store, pods: PodLogic, *, bookmark_interval: float):
        self.store = store
        self.pods = pods
        self.bookmark_interval = bookmark_interval

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            prefix, rest = "/api/v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            prefix, rest = f"/apis/{parts[1]}/{parts[2]}", parts[3:]
        else:
            raise ApiError(404, "the server could not find the requested resource")
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        resource = _BY_PATH.get((prefix, rest[0])) if rest else None
        if resource is None or len(rest) > 3 or (namespace is not None and not resource.namespaced):
            raise ApiError(404, "the server could not find the requested resource")
        name = rest[1] if len(rest) >= 2 else None
        subresource = rest[2] if len(rest) == 3 else None
        ns = namespace or ""
        method = request.method
        if subresource is not None:
            if resource is PODS and subresource == "eviction" and method == "POST":
                code, body, headers = self.pods.evict(ns, name, await read_body(request),
                                                      request.query.getall("dryRun", []))
                return web.json_response(body, status=code, headers=headers)
            if subresource == "status" and any(s.name == "status" for s in SUBRESOURCES.get(resource, ())):
                if method == "GET":
                    return web.json_response(self._get(resource, ns, name))
                if method in ("PUT", "PATCH"):
                    body = await read_body(request)
                    return web.json_response(self._update_status(resource, ns, name, request, body))
                raise ApiError(405, "the server does not allow this method on the requested resource")
            raise ApiError(404, "the server could not find the requested resource")
        if name is None:
            if method == "GET":
                return await self._list_or_watch(request, resource, namespace)
            if method == "POST" and (namespace is not None or not resource.namespaced):
                return web.json_response(self._create(resource, ns, await read_body(request), request), status=201)
        else:
            if method == "GET":
                printer = printer_for(request, resource, clock=self.store.clock)
                obj = self._get(resource, ns, name)
                return web.json_response(printer([obj]) if printer else obj)
            if method == "PUT":
                return web.json_response(self._update(resource, ns, name, await read_body(request), request))
            if method == "PATCH":
                return web.json_response(self._patch(resource, ns, name, request, await read_body(request)))
            if method == "DELETE":
                options = await read_body(request, empty=True)
                return web.json_response(self._delete(resource, ns, name, request, options))
        raise ApiError(405, "the server does not allow this method on the requested resource")

    # ------------------------------------------------------------------ verbs
    async def _list_or_watch(self, request: web.Request, resource: ResourceType,
                             namespace: str | None) -> web.StreamResponse:
        query = request.query
        try:
            labels = parse_label_selector(query.get("labelSelector"))
            fields = parse_field_selector(query.get("fieldSelector"), supported=resource.field_labels)
        except SelectorError as error:
            raise ApiError(400, str(error)) from None

        def matches(obj: dict | None) -> bool:
            if obj is None or (namespace is not None and obj["metadata"].get("namespace") != namespace):
                return False
            return labels_match(labels, obj["metadata"].get("labels")) and fields_match(fields, obj)

        printer = printer_for(request, resource, clock=self.store.clock)
        if query.get("watch", "").lower() in ("true", "1"):  # the Python clients send "true" or "True"
            rv = query.get("resourceVersion")
            if rv not in (None, "") and not rv.isdigit():
                raise ApiError(400, f"invalid resource version: {rv}")
            timeout = query.get("timeoutSeconds")
            initial = watch_list_options(query)
            return await serve_watch(request, store=self.store, resource=resource, matches=matches,
                                     resource_version=rv, timeout_seconds=float(timeout) if timeout else None,
                                     bookmarks=query.get("allowWatchBookmarks", "").lower() == "true",
                                     bookmark_interval=self.bookmark_interval,
                                     transform=(lambda obj, first: printer([self._decorate(resource, obj)],
                                                                           headers=first)) if printer else None,
                                     send_initial_events=initial)
        items = [self._decorate(resource, obj) for obj in self.store.list(resource, namespace) if matches(obj)]
        if printer:
            return web.json_response(printer(items, resource_version=str(self.store.revision)))
        return web.json_response({"kind": f"{resource.kind}List", "apiVersion": resource.api_version,
                                  "metadata": {"resourceVersion": str(self.store.revision)}, "items": items})

    def _get(self, resource: ResourceType, ns: str, name: str) -> dict:
        obj = self.store.get(resource, ns, name)
        if obj is None:
            raise not_found(resource, name)
        return self._decorate(resource, obj)

    def _decorate(self, resource: ResourceType, obj: dict) -> dict:
        if resource is PDBS:  # the disruption controller keeps status current; the fake computes it on read
            obj["status"] = self.pods.pdbs.status(obj, self.store.list(PODS))
        return obj

    def _create(self, resource: ResourceType, ns: str, obj: dict, request: web.Request) -> dict:
        meta = obj.setdefault("metadata", {})
        if resource.namespaced:
            if meta.get("namespace") not in (None, "", ns):
                raise ApiError(400, "the namespace of the provided object does not match the namespace sent on "
                                    "the request")
            meta["namespace"] = ns
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(422, f"{resource.kind}.{resource.api_version} is invalid: metadata.name: Required "
                                    "value: name or generateName is required", reason="Invalid")
            meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
        for key in ("resourceVersion", "uid", "creationTimestamp", "deletionTimestamp"):
            meta.pop(key, None)  # rest.BeforeCreate / FillObjectMetaSystemFields overwrite these
        _validate(resource, obj, ns)
        if resource is PODS:
            self.pods.admit(obj)
        if self.store.get(resource, ns, meta["name"]) is not None:
            raise ApiError(409, f'{resource.qualified} "{meta["name"]}" already exists', reason="AlreadyExists",
                           details={"name": meta["name"], "kind": resource.plural})
        if dry_run_of(request.query.getall("dryRun", [])):
            return obj
        return self.store.create(resource, obj)

    def _update(self, resource: ResourceType, ns: str, name: str, obj: dict, request: web.Request) -> dict:
        current = self.store.get(resource, ns, name)
        if current is None:
            raise not_found(resource, name)
        meta = obj.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise ApiError(400, "the name of the object does not match the name on the URL")
        wanted = meta.get("resourceVersion")
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            raise ApiError(409, f'Operation cannot be fulfilled on {resource.qualified} "{name}": the object has '
                                'been modified; please apply your changes to the latest version and try again',
                           reason="Conflict", details={"name": name, "kind": resource.plural})
        for key in ("uid", "creationTimestamp", "namespace", "generation"):
            if key in current["metadata"]:
                meta[key] = current["metadata"][key]
        meta["name"] = name
        if resource is PDBS and obj.get("spec") != current.get("spec"):
            meta["generation"] = current["metadata"].get("generation", 1) + 1
        _validate(resource, obj, ns)
        if dry_run_of(request.query.getall("dryRun", [])):
            return obj
        obj["kind"], obj["apiVersion"] = resource.kind, resource.api_version
        return self.store.update(resource, obj)

    def _patch(self, resource: ResourceType, ns: str, name: str, request: web.Request, patch: dict) -> dict:
        check_patch_type(request)
        current = self.store.get(resource, ns, name)
        if current is None:
            raise not_found(resource, name)
        merged = merge_patch(current, patch)
        merged.setdefault("metadata", {})["resourceVersion"] = (
            (patch.get("metadata") or {}).get("resourceVersion") or current["metadata"]["resourceVersion"])
        return self._update(resource, ns, name, merged, request)

    def _update_status(self, resource: ResourceType, ns: str, name: str, request: web.Request, body: dict) -> dict:
        """PUT or PATCH on ``/status``: only the status changes; the status strategies' PrepareForUpdate keep the
        stored spec and metadata (pkg/registry/core/pod/strategy.go podStatusStrategy, node/strategy.go)."""
        current = self.store.get(resource, ns, name)
        if current is None:
            raise not_found(resource, name)
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if request.method == "PATCH":
            check_patch_type(request)
            body = merge_patch(current, body)
        updated = {**current, "status": body.get("status")}
        updated["metadata"] = {**current["metadata"],
                               "resourceVersion": wanted or current["metadata"]["resourceVersion"]}
        return self._update(resource, ns, name, updated, request)

    def _delete(self, resource: ResourceType, ns: str, name: str, request: web.Request, options: dict) -> dict:
        query_grace = request.query.get("gracePeriodSeconds")
        if query_grace is not None:
            options = {**options, "gracePeriodSeconds": int(query_grace)}
        dry_run = dry_run_of(request.query.getall("dryRun", []) or options.get("dryRun") or [])
        if resource is PODS:
            return self.pods.delete(ns, name, options, dry_run=dry_run)
        current = self.store.get(resource, ns, name)
        if current is None:
            raise not_found(resource, name)
        if not dry_run:
            self.store.remove(resource, ns, name)
        return status_body(200, "", success=True, details={"name": name, "kind": resource.plural,
                                                           "uid": current["metadata"].get("uid")})
