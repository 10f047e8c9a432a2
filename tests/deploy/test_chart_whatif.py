"""The chart's fleet what-if (values ``whatif``): the token in both pods, the agents' `whatif` port, the flight
recorder on a hostPath, and a NetworkPolicy that lets only the controller's pods reach that port."""

from __future__ import annotations

import base64

from tests.deploy.chart_helpers import DOCUMENTED_OPTIONS, find, objects, one
from watchdog.config import load_settings
from watchdog.fleet.whatif_command import DEFAULT_TOKEN_FILE

ON = DOCUMENTED_OPTIONS["fleet what-if"]
OWN = DOCUMENTED_OPTIONS["fleet what-if, own token and paths"]


def container(docs: list[dict], kind: str) -> dict:
    [found] = one(docs, kind)["spec"]["template"]["spec"]["containers"]
    return found


def volume(docs: list[dict], kind: str, name: str) -> dict:
    [found] = [v for v in one(docs, kind)["spec"]["template"]["spec"]["volumes"] if v["name"] == name]
    return found


def agent_settings(docs: list[dict], tmp_path) -> object:
    path = tmp_path / "settings.yaml"
    path.write_text(one(docs, "ConfigMap", "gpu-watchdog-settings")["data"]["settings.yaml"])
    return load_settings(str(path), environ={})


def test_off_by_default_nothing_of_it_is_rendered(tmp_path):
    docs = objects()
    assert not find(docs, "NetworkPolicy") and not find(docs, "Secret", "gpu-watchdog-whatif")
    assert [port["name"] for port in container(docs, "DaemonSet")["ports"]] == ["metrics"]
    settings = agent_settings(docs, tmp_path)
    assert settings.whatif.token_file is None and not settings.flight_recorder.enabled


def test_the_agents_serve_it_on_the_whatif_port_with_the_token_and_a_flight_recorder(tmp_path):
    for values in (ON, OWN):
        docs = objects(values)
        agent = container(docs, "DaemonSet")
        settings = agent_settings(docs, tmp_path)
        ports = {port["name"]: port["containerPort"] for port in agent["ports"]}
        assert ports["whatif"] == settings.whatif.port == values["whatif"].get("port", 9436)
        mounts = {mount["name"]: mount["mountPath"] for mount in agent["volumeMounts"]}
        assert settings.whatif.token_file == mounts["whatif-token"] + "/token"
        assert settings.flight_recorder.enabled and settings.flight_recorder.directory == mounts["flight"]
        assert volume(docs, "DaemonSet", "flight")["hostPath"]["path"] == values["whatif"].get(
            "flightRecorderPath", "/var/lib/gpu-watchdog/flight")
        secret = values["whatif"].get("token", {}).get("secretName", "gpu-watchdog-whatif")
        assert volume(docs, "DaemonSet", "whatif-token")["secret"]["secretName"] == secret


def test_the_controller_pod_holds_the_token_where_the_command_looks_for_it():
    for values in (ON, OWN):
        docs = objects(values)
        controller = container(docs, "Deployment")
        mounts = {mount["name"]: mount["mountPath"] for mount in controller["volumeMounts"]}
        assert mounts["whatif-token"] + "/token" == DEFAULT_TOKEN_FILE
        assert volume(docs, "Deployment", "whatif-token")["secret"]["items"] == [{"key": "token", "path": "token"}]


def test_a_generated_token_is_one_token_in_both_namespaces_and_an_own_secret_is_not_rendered():
    docs = objects(ON)
    secrets = find(docs, "Secret", "gpu-watchdog-whatif")
    assert {s["metadata"]["namespace"] for s in secrets} == {"gpu-watchdog", "gpu-watchdog-controller"}
    tokens = {base64.b64decode(s["data"]["token"]) for s in secrets}
    assert len(tokens) == 1 and len(tokens.pop()) == 64
    assert not find(objects(OWN), "Secret", "my-whatif-token")


def test_only_the_controller_s_pods_reach_the_whatif_port_and_metrics_stay_open():
    policy = one(objects(ON), "NetworkPolicy", "gpu-watchdog-whatif", "gpu-watchdog")
    assert policy["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "gpu-watchdog"}}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    by_port = {rule["ports"][0]["port"]: rule.get("from") for rule in policy["spec"]["ingress"]}
    assert by_port["metrics"] is None  # every source, as without the policy
    assert by_port["whatif"] == [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gpu-watchdog-controller"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "gpu-watchdog-controller"}}}]
    assert not find(objects(OWN), "NetworkPolicy")
