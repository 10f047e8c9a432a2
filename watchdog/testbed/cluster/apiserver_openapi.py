"""The OpenAPI v3 documents of the fake API server: just enough for kubectl to send what it writes.

``kubectl create -f`` (and apply, replace, patch) validates a manifest before sending it. With the default
``--validate=strict`` it first asks whether the server validates fields itself: it reads ``/openapi/v3``, then the
group version's document, and looks for a ``fieldValidation`` query parameter on the PATCH operation tagged with
the object's group/version/kind (cli-runtime pkg/resource/query_param_verifier_v3.go supportsQueryParamV3). If the
documents are missing it falls back to ``/openapi/v2`` and, without that either, refuses with "failed to download
openapi". The fake therefore publishes, per group version, the operations it serves with their
``x-kubernetes-group-version-kind`` and query parameters, as the real server's spec builder writes them
(staging/src/k8s.io/apiserver/pkg/endpoints/installer.go), and no schemas: the fake keeps no field schemas, so it
cannot check fields the way the real server does with fieldValidation=Strict (a known difference, in
docs/fake-apiserver.md).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from aiohttp import web

from watchdog.testbed.cluster.apiserver_discovery import group_of, version_of
from watchdog.testbed.cluster.apiserver_store import RESOURCE_TYPES, ApiError, ResourceType

_WRITE_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation", "pretty")


def _operation(resource: ResourceType, action: str, parameters: tuple[str, ...]) -> dict[str, Any]:
    return {
        "operationId": f"{action}{resource.kind}",
        "parameters": [{"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
                       for name in parameters],
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": group_of(resource), "version": version_of(resource),
                                            "kind": resource.kind},
    }


def _paths(resource: ResourceType) -> dict[str, Any]:
    scope = f"{resource.prefix}/namespaces/{{namespace}}" if resource.namespaced else resource.prefix
    collection, item = f"{scope}/{resource.plural}", f"{scope}/{resource.plural}/{{name}}"
    return {
        collection: {"get": _operation(resource, "list", ("labelSelector", "fieldSelector", "resourceVersion",
                                                          "watch", "timeoutSeconds")),
                     "post": _operation(resource, "post", _WRITE_PARAMETERS)},
        item: {"get": _operation(resource, "get", ("pretty",)),
               "put": _operation(resource, "put", _WRITE_PARAMETERS),
               "patch": _operation(resource, "patch", (*_WRITE_PARAMETERS, "force")),
               "delete": _operation(resource, "delete", ("dryRun", "gracePeriodSeconds", "propagationPolicy"))},
    }


def _document(prefix: str) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for resource in RESOURCE_TYPES:
        if resource.prefix == prefix:
            paths.update(_paths(resource))
    if not paths:
        raise ApiError(404, "the server could not find the requested resource")
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes (gpu-watchdog fake API server)", "version": "v1.37.1"},
            "paths": paths, "components": {"schemas": {}}}


def _hash(document: dict[str, Any]) -> str:
    return hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest().upper()


async def root(request: web.Request) -> web.Response:
    """``/openapi/v3``: one entry per group version, with the hash clients use to cache its document."""
    prefixes = sorted({r.prefix for r in RESOURCE_TYPES})
    return web.json_response({"paths": {
        prefix.lstrip("/"): {"serverRelativeURL": f"/openapi/v3{prefix}?hash={_hash(_document(prefix))}"}
        for prefix in prefixes}})


async def group_version(request: web.Request) -> web.Response:
    return web.json_response(_document("/" + request.match_info["path"]))


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/openapi/v3", root)
    router.add_get("/openapi/v3/{path:apis?/.+}", group_version)
