"""A Kubernetes-faithful fake API server over real HTTP, for the agent's tests and the demo.

There is no kube-apiserver binary to run here (Debian ships none, and envtest downloads fail offline), and canned
responses (kmock) skip what matters most to an evicting agent: selectors, resourceVersions, 410 on old watches, PDBs
and the eviction subresource's exact answers. So this server keeps real state and reproduces those behaviours,
each with its Kubernetes source cited where it is implemented (apiserver_store, _watch, _pods, _pdb, _rest) and in
docs/fake-apiserver.md. The official ``kubernetes.aio`` client talks to it exactly as to a cluster.

This module is the lifecycle, the fault switches tests use to break things on purpose, and helpers that put
objects in place as if controllers and kubelets had already acted (a Running, Ready pod; a PDB).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Callable

from aiohttp import web

from watchdog.testbed.cluster.apiserver_discovery import SERVE_AGGREGATED
from watchdog.testbed.cluster.apiserver_discovery import add_routes as add_discovery_routes
from watchdog.testbed.cluster.apiserver_openapi import add_routes as add_openapi_routes
from watchdog.testbed.cluster.apiserver_pods import PodLogic, build_pod
from watchdog.testbed.cluster.kubevirt_eviction import KubevirtEvacuations
from watchdog.testbed.cluster.apiserver_rest import Rest
from watchdog.testbed.cluster.apiserver_store import (CONFIGMAPS, NODES, PDBS, PODS, PRIORITY_CLASSES, RESOURCE_TYPES,
                                                      ApiError, Store, status_body)
from watchdog.testbed.cluster.apiserver_watch import DROP, STALL, STOP, Bookmark

_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def _forbidden_message(method: str, path: str) -> str:
    """The RBAC authorizer's wording (staging/src/k8s.io/apiserver/pkg/endpoints/filters/authorization.go)."""
    parts = [p for p in path.split("/") if p]
    namespace = parts[parts.index("namespaces") + 1] if "namespaces" in parts else ""
    tail = parts[parts.index("namespaces") + 2:] if namespace else parts[2 + (parts[0] == "apis"):]
    resource = "/".join(tail[:1] + tail[2:3]) or "unknown"
    group = parts[1] if parts and parts[0] == "apis" else ""
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    # A GET of a collection is the "list" verb (apiserver/pkg/endpoints/request/requestinfo.go).
    verb = "list" if method == "GET" and len(tail) == 1 else _VERBS.get(method, method.lower())
    return (f'{resource} is forbidden: User "system:serviceaccount:gpu-watchdog:gpu-watchdog" cannot '
            f'{verb} resource "{resource}" in API group "{group}"{where}')


class FakeApiServer:
    """``async with FakeApiServer() as server: url = server.url`` — one aiohttp app on 127.0.0.1:<free port>."""

    def __init__(self, *, token: str | None = None, history: int = 1000, bookmark_interval: float = 60.0,
                 deletion_delay: float | None = None, instant_deletes: bool = False,
                 clock: Callable[[], float] = time.time, aggregated_discovery: bool = True):
        self.token = token
        self.aggregated_discovery = aggregated_discovery  # False: only the legacy discovery documents
        self.store = Store(history=history, clock=clock)
        self.unobserved_pdbs: set[str] = set()
        self.pods = PodLogic(self.store, deletion_delay=deletion_delay, instant_deletes=instant_deletes,
                             unobserved_pdbs=self.unobserved_pdbs)
        self.evacuations = KubevirtEvacuations(self.store)  # KubeVirt's eviction webhook and evacuation controller
        self.pods.interceptors.append(self.evacuations.admit)
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._rest = Rest(self.store, self.pods, bookmark_interval=bookmark_interval)
        self._faults: list[tuple[int, str | None]] = []
        self._delay = 0.0
        self._delay_clock: Callable[[], float] | None = None
        self.on_request: Callable[[str, str], None] | None = None  # (method, path) of each request as it arrives
        self._empty_watches = 0
        self._runner: web.AppRunner | None = None
        self.url = ""

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> str:
        app = web.Application(middlewares=[self._middleware])
        app[SERVE_AGGREGATED] = self.aggregated_discovery
        add_discovery_routes(app.router)
        add_openapi_routes(app.router)
        app.router.add_route("*", "/{tail:.*}", self._rest.dispatch)
        # handler_cancellation: a client that gives up (timeout) cancels its handler, as Go's server does.
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # aiohttp exposes the bound port only here
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        self.pods.cancel_all()
        self.store.broadcast(STOP)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> "FakeApiServer":
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        self.requests.append((request.method, request.path, dict(request.query)))
        if self.on_request is not None:
            self.on_request(request.method, request.path)
        if self._delay and self._delay_clock is not None:
            until = self._delay_clock() + self._delay
            while self._delay and self._delay_clock() < until:  # a slow API server on a simulated time line
                await asyncio.sleep(0.001)
        elif self._delay:
            await asyncio.sleep(self._delay)
        for index, (status, prefix) in enumerate(self._faults):
            if prefix is None or request.path.startswith(prefix):
                del self._faults[index]
                message = _forbidden_message(request.method, request.path) if status == 403 else "injected fault"
                return web.json_response(status_body(status, message), status=status)
        if self.token is not None and request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response(status_body(401, "Unauthorized"), status=401)
        if self._empty_watches and request.query.get("watch", "").lower() in ("true", "1"):
            self._empty_watches -= 1
            return web.Response(status=200, body=b"", content_type="application/json")
        try:
            return await handler(request)
        except ApiError as error:
            headers = {}
            retry = (error.body.get("details") or {}).get("retryAfterSeconds")
            if retry:
                headers["Retry-After"] = str(retry)
            return web.json_response(error.body, status=error.code, headers=headers)

    # ------------------------------------------------------------------ fault switches
    def fail_next(self, n: int = 1, *, status: int = 500, path_prefix: str | None = None) -> None:
        """Answer the next ``n`` requests (under ``path_prefix``, if given) with a ``status`` Status."""
        self._faults.extend([(status, path_prefix)] * n)

    def delay(self, seconds: float, *, clock: Callable[[], float] | None = None) -> None:
        """Hold every request this long before answering (0 to stop); for client timeouts. With ``clock`` (a
        simulated world's), the seconds are that clock's: the request is answered once it has moved on that far."""
        self._delay = seconds
        self._delay_clock = clock

    def drop_watches(self) -> None:
        """Close every open watch connection abruptly, as a restarting API server or a proxy would."""
        self.store.broadcast(DROP)

    def end_watches_at_once(self, count: int = 1) -> None:
        """Answer the next ``count`` watch requests with 200 and an empty body that ends at once, as a proxy that
        cuts streams does (the client sees a "clean" end with nothing received)."""
        self._empty_watches += count

    def stall_watches(self) -> None:
        """Every open watch stops sending anything (events, bookmarks, its timeout's end) but stays open: a
        half-open connection as the client sees it. Watches opened afterwards are normal."""
        self.store.broadcast(STALL)

    def send_bookmark(self) -> None:
        """Send a BOOKMARK (at the current revision) on every watch that asked for bookmarks."""
        self.store.broadcast(Bookmark(self.store.revision))

    def expire_history(self) -> None:
        """Make every resourceVersion before now "too old": watches resuming from one get 410."""
        self.store.expire_history()

    def finish_deletions(self) -> int:
        """Complete pending graceful deletions now (each pod gets its DELETED event)."""
        return self.pods.finish_deletions()

    async def watching(self, count: int = 1, *, resource: str = "pods", timeout: float = 5.0) -> None:
        """Wait (bounded) until at least ``count`` watches of ``resource`` are open, so a test's next change or
        fault reaches a live stream rather than racing the client's reconnect."""
        resource_type = self._resource(resource)

        async def wait() -> None:
            while self.store.watch_count(resource_type) < count:
                self.store.subscribers_changed.clear()
                await self.store.subscribers_changed.wait()

        await asyncio.wait_for(wait(), timeout)

    def write_kubeconfig(self, path: str | Path, *, name: str = "gpu-watchdog-fake",
                         namespace: str = "default") -> Path:
        """Write a kubeconfig a real client (kubectl, client-go) can use to reach this server: plain HTTP on the
        loopback, the bearer token when the server wants one. Returns the path."""
        user = {"token": self.token} if self.token is not None else {}
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": name, "preferences": {},
            "clusters": [{"name": name, "cluster": {"server": self.url}}],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        }
        target = Path(path)
        target.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML: every kubeconfig loader reads it
        return target

    @property
    def resource_version(self) -> str:
        return str(self.store.revision)

    # ------------------------------------------------------------------ helpers for tests and the demo
    def add_pod(self, pod: dict[str, Any] | None = None, *, namespace: str = "default", name: str = "",
                node: str = "node-1", priority: int = 0, priority_class: str = "",
                labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
                phase: str = "Running", ready: bool = True, containers: list | None = None,
                owner_kind: str | None = "ReplicaSet", qos: str = "BestEffort",
                requests: dict[str, str] | None = None) -> dict[str, Any]:
        """Store a pod as a kubelet would have left it (no admission); returns it with uid and resourceVersion."""
        if pod is None:
            if not name:
                raise ValueError("add_pod needs a pod dict or a name")
            pod = build_pod(namespace=namespace, name=name, node=node, priority=priority,
                            priority_class=priority_class, labels=labels or {}, annotations=annotations or {},
                            phase=phase, ready=ready, containers=containers or ["main"], owner_kind=owner_kind,
                            qos=qos, requests=requests)
        meta = pod.setdefault("metadata", {})
        if not meta.get("name"):
            raise ValueError("a pod needs metadata.name")
        meta.setdefault("namespace", namespace)
        if self.store.get(PODS, meta["namespace"], meta["name"]) is not None:
            raise ValueError(f"pod {meta['namespace']}/{meta['name']} already exists")
        return self.store.create(PODS, pod)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.store.get(PODS, namespace, name)

    def set_pod_ready(self, namespace: str, name: str, ready: bool = True) -> dict[str, Any]:
        pod = self._pod(namespace, name)
        status = pod.setdefault("status", {})
        status["conditions"] = [c for c in status.get("conditions", []) if c.get("type") != "Ready"]
        status["conditions"].append({"type": "Ready", "status": "True" if ready else "False"})
        for container in status.get("containerStatuses") or ():
            container["ready"] = ready
        return self.store.update(PODS, pod)

    def set_pod_phase(self, namespace: str, name: str, phase: str) -> dict[str, Any]:
        pod = self._pod(namespace, name)
        pod.setdefault("status", {})["phase"] = phase
        return self.store.update(PODS, pod)

    def _pod(self, namespace: str, name: str) -> dict[str, Any]:
        pod = self.store.get(PODS, namespace, name)
        if pod is None:
            raise KeyError(f"no pod {namespace}/{name}")
        return pod

    def add_pdb(self, *, namespace: str, name: str, selector: dict[str, str] | None = None,
                min_available: int | str | None = None, max_unavailable: int | str | None = None,
                observed: bool = True, expected: int | None = None,
                unhealthy_pod_eviction_policy: str | None = None) -> dict[str, Any]:
        """A policy/v1 PDB selecting ``selector`` (matchLabels); ``observed=False`` mimics a PDB the disruption
        controller has not processed yet (evictions then get 429 with retryAfterSeconds 10). ``expected`` is the
        owning workload's replicas (expectedPods for maxUnavailable and percentages); by default, the most pods
        the selector has matched at once. ``unhealthy_pod_eviction_policy``: "IfHealthyBudget" or "AlwaysAllow"."""
        spec: dict[str, Any] = {"selector": {"matchLabels": dict(selector or {})}}
        if min_available is not None:
            spec["minAvailable"] = min_available
        if max_unavailable is not None:
            spec["maxUnavailable"] = max_unavailable
        if unhealthy_pod_eviction_policy is not None:
            if unhealthy_pod_eviction_policy not in ("IfHealthyBudget", "AlwaysAllow"):
                raise ValueError(f"unhealthyPodEvictionPolicy must be IfHealthyBudget or AlwaysAllow, "
                                 f"got {unhealthy_pod_eviction_policy!r}")
            spec["unhealthyPodEvictionPolicy"] = unhealthy_pod_eviction_policy
        if not observed:
            self.unobserved_pdbs.add(name)
        created = self.store.create(PDBS, {"metadata": {"name": name, "namespace": namespace}, "spec": spec})
        if expected is not None:
            self.pods.pdbs.set_expected(created, expected)
        return created

    def set_pdb_expected(self, namespace: str, name: str, expected: int | None) -> None:
        """Change a PDB's expected pods, as scaling its workload would (None: back to the high-water mark)."""
        pdb = self.store.get(PDBS, namespace, name)
        if pdb is None:
            raise KeyError(f"no PodDisruptionBudget {namespace}/{name}")
        self.pods.pdbs.set_expected(pdb, expected)

    def add_node(self, name: str, *, labels: dict[str, str] | None = None, ready: bool = True,
                 unschedulable: bool = False, capacity: dict[str, str] | None = None,
                 address: str = "10.0.0.10", taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
        """A Node as its kubelet registers and keeps it (the Ready condition, nodeInfo, an InternalIP), so
        ``kubectl get nodes``, ``cordon`` and ``drain`` find the node the pods run on."""
        resources = {"cpu": "32", "memory": "256Gi", "pods": "110", **(capacity or {})}
        return self.store.create(NODES, {
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                  **(labels or {})}},
            "spec": {**({"unschedulable": True} if unschedulable else {}), **({"taints": taints} if taints else {})},
            "status": {
                "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                "reason": "KubeletReady" if ready else "KubeletNotReady"}],
                "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
                "capacity": dict(resources), "allocatable": dict(resources),
                "nodeInfo": {"kubeletVersion": "v1.37.1", "osImage": "Debian GNU/Linux 12 (bookworm)",
                             "kernelVersion": "6.1.0", "containerRuntimeVersion": "containerd://2.1.0",
                             "operatingSystem": "linux", "architecture": "amd64",
                             # required strings of v1 NodeSystemInfo (typed clients refuse a node without them);
                             # kubeProxyVersion is deprecated and written empty (core/v1/types.go, no omitempty)
                             "machineID": f"{name}-machine", "systemUUID": f"{name}-uuid",
                             "bootID": f"{name}-boot", "kubeProxyVersion": ""},
            },
        })

    def add_priority_class(self, name: str, value: int, *, global_default: bool = False) -> dict[str, Any]:
        return self.store.create(PRIORITY_CLASSES, {"metadata": {"name": name}, "value": value,
                                                    "globalDefault": global_default})

    def set_config_map(self, namespace: str, name: str, data: dict[str, str]) -> dict[str, Any]:
        current = self.store.get(CONFIGMAPS, namespace, name)
        if current is None:
            return self.store.create(CONFIGMAPS, {"metadata": {"name": name, "namespace": namespace}, "data": data})
        current["data"] = dict(data)
        return self.store.update(CONFIGMAPS, current)

    def add_object(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store any object of a served resource ("namespaces", "networkpolicies", …) as already admitted."""
        resource_type = self._resource(resource)
        meta = obj.get("metadata") or {}
        if not meta.get("name") or resource_type.namespaced != bool(meta.get("namespace")):
            raise ValueError(f"a {resource_type.kind} needs metadata.name"
                             + (" and metadata.namespace" if resource_type.namespaced else " and no namespace"))
        return self.store.create(resource_type, obj)

    def objects(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every stored object of a resource ("pods", "events", "leases", …) for assertions."""
        return self.store.list(self._resource(resource), namespace)

    @staticmethod
    def _resource(name: str):
        for resource_type in RESOURCE_TYPES:
            if resource_type.plural == name or resource_type.qualified == name:
                return resource_type
        raise KeyError(f"unknown resource {name!r}")
