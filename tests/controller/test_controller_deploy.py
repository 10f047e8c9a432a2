"""deploy/controller.yaml agrees with the controller's settings, the Alertmanager example and the RBAC it needs."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import yaml

from watchdog.config import Settings
from watchdog.config.loading import env_overrides

ROOT = Path(__file__).resolve().parents[2]


def documents(name: str) -> dict[tuple[str, str], dict]:
    docs = [d for d in yaml.safe_load_all((ROOT / name).read_text()) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_deployment_runs_two_replicas_named_by_the_downward_api():
    deploy = documents("deploy/controller.yaml")
    spec = deploy[("Deployment", "gpu-watchdog-controller")]["spec"]
    assert spec["replicas"] == 2
    [container] = spec["template"]["spec"]["containers"]
    assert container["args"][0] == "controller"
    identity = next(e for e in container["env"] if e["name"] == "GPU_WATCHDOG_CONTROLLER__IDENTITY")
    assert identity["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env_overrides({"GPU_WATCHDOG_CONTROLLER__IDENTITY": "pod-a"}, known=Settings.model_fields) == {
        "controller": {"identity": "pod-a"}
    }


def test_settings_token_mount_and_service_match_the_alertmanager_example():
    deploy = documents("deploy/controller.yaml")
    settings = Settings.model_validate(
        yaml.safe_load(deploy[("ConfigMap", "gpu-watchdog-controller-settings")]["data"]["settings.yaml"])
    )
    pod = deploy[("Deployment", "gpu-watchdog-controller")]["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    token_dir, token_name = settings.controller.token_file.rsplit("/", 1)
    assert mounts["webhook-token"] == token_dir
    assert volumes["webhook-token"]["secret"]["items"][0]["path"] == token_name
    assert settings.policy_file.startswith(mounts["policy"] + "/")

    alertmanager = yaml.safe_load((ROOT / "alerts/alertmanager.example.yaml").read_text())
    receiver = next(r for r in alertmanager["receivers"] if r["name"] == "gpu-watchdog-controller")
    url = urlparse(receiver["webhook_configs"][0]["url"])
    service = deploy[("Service", "gpu-watchdog-controller")]
    assert url.hostname == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    [port] = service["spec"]["ports"]
    assert url.port == port["port"] == settings.controller.listen_port
    assert url.path == "/api/v1/alertmanager"
    template = deploy[("Deployment", "gpu-watchdog-controller")]["spec"]["template"]
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()


def grants(rules: list[dict], group: str, resource: str, verb: str, name: str | None = None) -> bool:
    return any(
        group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
        and (not r.get("resourceNames") or name in r["resourceNames"])
        for r in rules
    )


def test_rbac_covers_what_the_controller_calls():
    rbac = documents("deploy/rbac.yaml")
    settings = Settings().controller
    cluster = rbac[("ClusterRole", "gpu-watchdog-controller")]["rules"]
    local = rbac[("Role", "gpu-watchdog-controller")]["rules"]
    assert grants(cluster, "", "pods", "list") and grants(cluster, "", "pods/eviction", "create")
    assert grants(cluster, "", "events", "create")
    for verb in ("get", "create", "update"):
        assert grants(local, "coordination.k8s.io", "leases", verb, settings.lease_name)
        assert grants(local, "", "configmaps", verb, settings.handled_configmap)
    deploy = documents("deploy/controller.yaml")
    pod = deploy[("Deployment", "gpu-watchdog-controller")]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == rbac[("ServiceAccount", "gpu-watchdog-controller")]["metadata"]["name"]
    assert settings.lease_namespace == rbac[("Role", "gpu-watchdog-controller")]["metadata"]["namespace"]


def test_the_agents_identity_cannot_touch_the_lease_or_write_configmaps():
    """Every GPU node runs the agent with host mounts: it gets what it calls, never the controller's rights."""
    rbac = documents("deploy/rbac.yaml")
    cluster = rbac[("ClusterRole", "gpu-watchdog")]["rules"]
    local = rbac[("Role", "gpu-watchdog")]["rules"]
    assert grants(cluster, "", "pods", "watch") and grants(cluster, "", "pods/eviction", "create")
    assert grants(cluster, "", "events", "list")  # restoring its recent evictions at start
    assert grants(local, "", "configmaps", "get", "gpu-watchdog-kill-switch")
    for verb in ("create", "update"):
        assert not grants(local, "", "configmaps", verb, "gpu-watchdog-controller-handled")
        assert not grants(local, "coordination.k8s.io", "leases", verb, "gpu-watchdog-controller")
    daemonset = documents("deploy/daemonset.yaml")[("DaemonSet", "gpu-watchdog")]["spec"]["template"]["spec"]
    assert daemonset["serviceAccountName"] == "gpu-watchdog"
