"""One owner for the agent's connection to the API server.

Everything that talks to Kubernetes (pod watch, evictions, events, leases, kill switch) shares one ``kubernetes.aio``
ApiClient, i.e. one aiohttp session and connection pool, created here from whichever source of credentials the
deployment uses: in-cluster service account, a kubeconfig, or a plain URL (tests and the demo's fake server). The
rest of the project never imports ``kubernetes``; it receives a ``KubeApi``.

``request_json`` exists for writes whose wire format the generated models get wrong: they serialise datetimes with
``isoformat()``, which drops the fraction when microsecond == 0, but MicroTime fields (Lease acquireTime/renewTime,
eventTime) must carry exactly six fraction digits or the API server refuses the object
(apimachinery/pkg/apis/meta/v1/micro_time.go, RFC3339Micro).
"""

from __future__ import annotations

import os
from typing import Any

from kubernetes.aio import client as k8s
from kubernetes.aio import config as k8s_config

from watchdog.config.kube import KubeSettings
from watchdog.kube.errors import KubeConfigUnusable, KubeError, error_for_status, kube_errors, status_body
from watchdog.kube.permissions import DeclaredOperations, check_declared, path_request


class KubeApi:
    """``async with KubeApi.from_url(url) as api: await api.request_json("GET", "/api/v1/pods")``."""

    def __init__(self, configuration: k8s.Configuration, *, timeout: float = 10.0,
                 enforce_permissions: bool = False):
        """``enforce_permissions``: refuse every call watchdog/kube/permissions.py does not declare (the agent's
        and the controller's clients, which RBAC binds to that table); tests setting up a cluster leave it off."""
        self.configuration = configuration
        self.timeout = timeout
        self.enforce_permissions = enforce_permissions
        self.api_client = k8s.ApiClient(configuration)
        self._apis: dict[str, Any] = {}
        if enforce_permissions:
            self.restrict_to_declared_permissions()

    # The generated API classes, built on first use: each imports every model its group names (CoreV1Api alone holds
    # 24 MiB resident), and the agent's own calls go through `send` and `request_json`, which need none of them.
    def _api(self, name: str, cls_name: str) -> Any:
        api = self._apis.get(name)
        if api is None:
            api = getattr(k8s, cls_name)(self.api_client)
            self._apis[name] = api = DeclaredOperations(api) if self.enforce_permissions else api
        return api

    @property
    def core(self) -> Any:
        return self._api("core", "CoreV1Api")

    @property
    def coordination(self) -> Any:
        return self._api("coordination", "CoordinationV1Api")

    @property
    def events(self) -> Any:
        return self._api("events", "EventsV1Api")

    @property
    def policy(self) -> Any:
        return self._api("policy", "PolicyV1Api")

    @property
    def resource(self) -> Any:
        return self._api("resource", "ResourceV1Api")  # resource.k8s.io/v1: DRA ResourceSlices

    @property
    def scheduling(self) -> Any:
        return self._api("scheduling", "SchedulingV1Api")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_url(cls, url: str, *, token: str | None = None, timeout: float = 10.0,
                 verify_ssl: bool = True) -> "KubeApi":
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"API server URL must start with http:// or https://, got {url!r}")
        configuration = k8s.Configuration(host=url.rstrip("/"), verify_ssl=verify_ssl)
        if token:
            configuration.api_key = {"BearerToken": token}
            configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return cls(configuration, timeout=timeout)

    @classmethod
    def in_cluster(cls, *, timeout: float = 10.0) -> "KubeApi":
        """The pod's service account (KUBERNETES_SERVICE_HOST + /var/run/secrets/kubernetes.io/serviceaccount)."""
        configuration = k8s.Configuration()
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
        except k8s_config.ConfigException as error:
            raise KubeError(f"not running in a cluster: {error}") from error
        return cls(configuration, timeout=timeout)

    @classmethod
    async def from_kubeconfig(cls, path: str, *, context: str | None = None, timeout: float = 10.0) -> "KubeApi":
        # The client treats its config_file as one entry of a KUBECONFIG list and skips it when it does not exist,
        # then fails on the empty result ("Expected key current-context"): a missing file is said as such first.
        if not os.path.exists(path):
            raise KubeConfigUnusable(f"cannot load kubeconfig {path}: no such file")
        if os.path.isdir(path):
            raise KubeConfigUnusable(f"cannot load kubeconfig {path}: a directory, not a file")
        configuration = k8s.Configuration()
        try:
            await k8s_config.load_kube_config(config_file=path, context=context,
                                              client_configuration=configuration)
        except (k8s_config.ConfigException, OSError) as error:
            raise KubeConfigUnusable(f"cannot load kubeconfig {path}: {error}") from error
        return cls(configuration, timeout=timeout)

    @classmethod
    async def from_settings(cls, settings: KubeSettings) -> "KubeApi | None":
        """The agent's or the controller's client, as the settings ask for it (None when access is "none"): it sends
        only the calls watchdog/kube/permissions.py declares, which the chart's RBAC grants."""
        timeout = settings.request_timeout_seconds
        if settings.access == "none":
            return None
        if settings.access == "url":
            if not settings.url:
                raise ValueError("kube.access is 'url' but kube.url is not set")
            api = cls.from_url(settings.url, token=settings.token, timeout=timeout)
        elif settings.access == "kubeconfig":
            if not settings.kubeconfig:
                raise ValueError("kube.access is 'kubeconfig' but kube.kubeconfig is not set")
            api = await cls.from_kubeconfig(settings.kubeconfig, context=settings.context, timeout=timeout)
        else:
            api = cls.in_cluster(timeout=timeout)
        return api.restrict_to_declared_permissions()

    def restrict_to_declared_permissions(self) -> "KubeApi":
        """From now on, refuse (KubeCallNotDeclared) every call watchdog/kube/permissions.py does not list."""
        self.enforce_permissions = True
        for name, api in list(self._apis.items()):
            if not isinstance(api, DeclaredOperations):
                self._apis[name] = DeclaredOperations(api)
        return self

    # ------------------------------------------------------------------ lifecycle
    async def close(self) -> None:
        await self.api_client.close()

    async def __aenter__(self) -> "KubeApi":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def host(self) -> str:
        return self.configuration.host

    # ------------------------------------------------------------------ raw requests
    async def send(self, method: str, path: str, *, query: dict[str, Any] | None = None,
                   body: Any = None, timeout: float | None = None,
                   content_type: str = "application/json") -> Any:
        """One request, its answer unread: the aiohttp response, as the generated ``*_without_preload_content``
        calls return it (read it, or stream a watch from ``.content``). ``query`` keys may be snake_case
        (``field_selector``); None values are left out. Raises the client's own errors for transport failures
        (callers wrap it in ``kube_errors()``); a non-2xx answer is returned like any other."""
        params = [(_camel(key), value) for key, value in (query or {}).items() if value is not None]
        if self.enforce_permissions:
            check_declared(path_request(method, path, query={key: str(value).lower() for key, value in params}))
        serialized = await self.api_client.param_serialize(
            method=method, resource_path=path, query_params=params or None,
            header_params={"Accept": "application/json", "Content-Type": content_type}, body=body,
            auth_settings=["BearerToken"])
        response = await self.api_client.call_api(*serialized, _request_timeout=timeout or self.timeout)
        return response.response

    async def request_json(self, method: str, path: str, *, query: dict[str, str] | None = None,
                           body: dict[str, Any] | None = None,
                           content_type: str = "application/json") -> dict[str, Any]:
        """Send ``body`` exactly as given (no model serialisation); return the parsed 2xx body.

        Raises a KubeError subclass for a non-2xx answer or a transport failure.
        """
        if self.enforce_permissions:
            check_declared(path_request(method, path, query=query))
        headers = {"Accept": "application/json", "Content-Type": content_type}
        serialized = await self.api_client.param_serialize(
            method=method, resource_path=path, query_params=list((query or {}).items()) or None,
            header_params=headers, body=body, auth_settings=["BearerToken"])
        with kube_errors():
            response = await self.api_client.call_api(*serialized, _request_timeout=self.timeout)
            raw = await response.read()
        parsed = status_body(raw)
        if not 200 <= response.status < 300:
            raise error_for_status(response.status, parsed, fallback=str(response.reason or ""))
        if raw and not parsed:
            raise KubeError(f"{method} {path}: the answer is not a JSON object: {raw[:200]!r}")
        return parsed


def _camel(name: str) -> str:
    """A query parameter as the API server names it: field_selector → fieldSelector."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)
