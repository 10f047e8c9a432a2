"""One kubeconfig rule for every command a person runs (explain, audit, controller), kubectl's order, and a missing
file said as such rather than as the client's "Expected key current-context"."""

from __future__ import annotations

import os

import pytest

from tests.fake_api import FakeApi
from watchdog.config.kube import KubeSettings
from watchdog.kube import KubeApi, KubeConfigUnusable, command_line_access, kubeconfig_path


def test_kubectls_order_flag_then_kubeconfig_then_home(tmp_path):
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    present, absent = tmp_path / "present", tmp_path / "absent"
    present.write_text("{}")
    listed = {"KUBECONFIG": os.pathsep.join([str(absent), str(present)])}
    assert kubeconfig_path("flag.yaml", environ=listed, home=str(home)) == "flag.yaml"
    assert kubeconfig_path(None, environ=listed, home=str(home)) == str(present)  # the first that exists
    assert kubeconfig_path(None, environ={"KUBECONFIG": str(absent)}, home=str(home)) == str(absent)  # said, not skipped
    assert kubeconfig_path(None, environ={}, home=str(home)) is None  # in-cluster
    (home / ".kube" / "config").write_text("{}")
    assert kubeconfig_path(None, environ={"KUBECONFIG": ""}, home=str(home)) == str(home / ".kube" / "config")


@pytest.mark.parametrize("make", ["missing", "directory"])
async def test_a_kubeconfig_that_is_not_a_file_is_named_with_the_reason(tmp_path, make):
    path = tmp_path / "kubeconfig"
    if make == "directory":
        path.mkdir()
    with pytest.raises(KubeConfigUnusable) as raised:
        await KubeApi.from_kubeconfig(str(path))
    assert str(path) in str(raised.value) and "current-context" not in str(raised.value)
    assert ("no such file" if make == "missing" else "a directory") in str(raised.value)
    with pytest.raises(KubeConfigUnusable, match="no such file"):  # the agent's and the controller's settings too
        await KubeApi.from_settings(KubeSettings(access="kubeconfig", kubeconfig=str(tmp_path / "nope")))


def test_the_controller_follows_the_same_rule_unless_its_settings_name_an_access(tmp_path):
    env = {"KUBECONFIG": str(tmp_path / "config")}
    (tmp_path / "config").write_text("{}")
    found = command_line_access(KubeSettings(), environ=env, home=str(tmp_path))
    assert (found.access, found.kubeconfig) == ("kubeconfig", str(tmp_path / "config"))
    assert command_line_access(KubeSettings(), environ={}, home=str(tmp_path)).access == "in-cluster"
    explicit = KubeSettings(access="in-cluster")
    assert command_line_access(explicit, environ=env, home=str(tmp_path)) == explicit
    flagged = command_line_access(explicit, kubeconfig="other.yaml", context="dev", environ=env)
    assert (flagged.access, flagged.kubeconfig, flagged.context) == ("kubeconfig", "other.yaml", "dev")


async def test_the_controllers_client_reaches_the_cluster_named_by_kubeconfig(fake_api: FakeApi, tmp_path):
    server = await fake_api.server()
    path = server.write_kubeconfig(tmp_path / "kubeconfig", name="ctx-a")
    settings = command_line_access(KubeSettings(), context="ctx-a", environ={"KUBECONFIG": str(path)})
    async with await KubeApi.from_settings(settings) as api:
        assert api.host == server.url
        assert (await api.request_json("GET", "/api/v1/namespaces/ml/pods"))["items"] == []
