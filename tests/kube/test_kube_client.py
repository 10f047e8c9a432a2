"""KubeApi construction, authentication and the error tree."""

from __future__ import annotations

import pytest

from tests.fake_api import FakeApi
from watchdog.config.kube import KubeSettings
from watchdog.kube.client import KubeApi
from watchdog.kube.errors import KubeConflict, KubeError, KubeForbidden, KubeNotFound, KubeUnavailable


async def test_bearer_token_is_sent(fake_api: FakeApi):
    server = await fake_api.server(token="s3cret")
    good, bad = await fake_api.client(server, token="s3cret"), await fake_api.client(server, token="wrong")
    assert (await good.core.list_namespaced_pod("ml")).items == []
    with pytest.raises(KubeForbidden):
        await bad.request_json("GET", "/api/v1/namespaces/ml/pods")


async def test_from_settings(server):
    assert await KubeApi.from_settings(KubeSettings(access="none")) is None
    api = await KubeApi.from_settings(KubeSettings(access="url", url=server.url, request_timeout_seconds=3))
    async with api:
        assert api.host == server.url and api.timeout == 3
    with pytest.raises(ValueError, match="kube.url"):
        await KubeApi.from_settings(KubeSettings(access="url"))
    with pytest.raises(KubeError, match="kubeconfig"):
        await KubeApi.from_settings(KubeSettings(access="kubeconfig", kubeconfig="/nonexistent/config"))


def test_in_cluster_outside_a_cluster_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeError, match="not running in a cluster"):
        KubeApi.in_cluster()


def test_bad_url_is_refused():
    with pytest.raises(ValueError, match="http"):
        KubeApi.from_url("127.0.0.1:6443")


async def test_from_kubeconfig(server, tmp_path):
    path = tmp_path / "config"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: '{server.url}'}}}}]\n"
        "users: [{name: me, user: {token: abc}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: me}}]\n")
    async with await KubeApi.from_kubeconfig(str(path)) as api:
        assert (await api.request_json("GET", "/api/v1/namespaces/ml/configmaps"))["items"] == []


async def test_error_tree(server, api):
    with pytest.raises(KubeNotFound):
        await api.request_json("GET", "/api/v1/namespaces/ml/configmaps/none")
    body = {"metadata": {"name": "cm"}, "data": {}}
    await api.request_json("POST", "/api/v1/namespaces/ml/configmaps", body=body)
    with pytest.raises(KubeConflict):
        await api.request_json("POST", "/api/v1/namespaces/ml/configmaps", body=body)
    server.fail_next(1, status=503)
    with pytest.raises(KubeUnavailable):
        await api.request_json("GET", "/api/v1/namespaces/ml/configmaps/cm")
    async with KubeApi.from_url("http://127.0.0.1:9", timeout=1) as unreachable:
        with pytest.raises(KubeUnavailable, match="cannot reach"):
            await unreachable.request_json("GET", "/api/v1/pods")
