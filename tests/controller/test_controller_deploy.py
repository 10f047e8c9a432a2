"""deploy/controller.yaml agrees with the controller's settings, the Alertmanager example and the RBAC it needs."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import yaml

from watchdog.config import Policy, Settings
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


# ---------------------------------------------------------------- a bounded identity

AGENTS, CONTROLLERS = "gpu-watchdog", "gpu-watchdog-controller"
WRITES = ("create", "update", "patch", "delete", "deletecollection", "*")


def controller_settings() -> Settings:
    config_map = documents("deploy/controller.yaml")[("ConfigMap", "gpu-watchdog-controller-settings")]
    return Settings.model_validate(yaml.safe_load(config_map["data"]["settings.yaml"]))


def rules_of(account_namespace: str, account: str, namespace: str) -> list[dict]:
    """Every RBAC rule the service account holds in `namespace`: its RoleBindings there and its ClusterRoleBindings."""
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy/rbac.yaml").read_text()) if d]
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs
             if d["kind"] in ("Role", "ClusterRole")}
    rules = []
    for binding in docs:
        if binding["kind"] == "RoleBinding" and binding["metadata"]["namespace"] != namespace:
            continue
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and s["name"] == account and s["namespace"] == account_namespace
                   for s in binding["subjects"]):
            continue
        ref = binding["roleRef"]
        role_namespace = binding["metadata"]["namespace"] if ref["kind"] == "Role" else None
        rules += roles[(ref["kind"], role_namespace, ref["name"])]["rules"]
    return rules


def test_every_binding_names_a_service_account_that_exists_where_it_says():
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy/rbac.yaml").read_text()) if d]
    accounts = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "ServiceAccount"}
    assert accounts == {(AGENTS, "gpu-watchdog"), (CONTROLLERS, "gpu-watchdog-controller")}
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        for subject in binding["subjects"]:
            assert (subject["namespace"], subject["name"]) in accounts, binding["metadata"]["name"]


def test_the_controller_reads_the_kill_switch_and_can_never_change_it():
    """An operator's pause belongs to the operator: where the switch lives (the agents' namespace) the controller gets
    `get` on it and no write verb at all, and neither does the agent."""
    settings = controller_settings()
    switch = Policy().action.kill_switch.name
    assert settings.namespace == AGENTS  # where the kill switch and the budget live (the agents' namespace)
    controller = rules_of(CONTROLLERS, "gpu-watchdog-controller", AGENTS)
    assert grants(controller, "", "configmaps", "get", switch)
    for verb in WRITES:
        assert not grants(controller, "", "configmaps", verb, switch), verb
        assert not grants(rules_of(AGENTS, "gpu-watchdog", AGENTS), "", "configmaps", verb, switch), verb


def test_both_identities_may_take_budget_slots_and_nothing_broader():
    budget = Policy().action.cluster_budget.name
    for account_namespace, account in ((AGENTS, "gpu-watchdog"), (CONTROLLERS, "gpu-watchdog-controller")):
        rules = rules_of(account_namespace, account, AGENTS)
        assert grants(rules, "", "configmaps", "get", budget) and grants(rules, "", "configmaps", "update", budget)
        for rule in rules:  # no write on ConfigMaps of the agents' namespace beyond the named ones
            if "configmaps" in rule["resources"] and set(rule["verbs"]) & set(WRITES):
                assert rule.get("resourceNames") == [budget], rule
    agent = rules_of(AGENTS, "gpu-watchdog", AGENTS)
    assert not grants(agent, "", "configmaps", "create", budget)  # the budget ships with the DaemonSet


def test_the_controller_lives_in_its_own_restricted_namespace():
    rbac = documents("deploy/rbac.yaml")
    labels = {name: d["metadata"].get("labels", {}) for (kind, name), d in rbac.items() if kind == "Namespace"}
    assert labels[CONTROLLERS]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels[AGENTS]["pod-security.kubernetes.io/enforce"] == "privileged"
    for (kind, name), doc in documents("deploy/controller.yaml").items():
        assert doc["metadata"]["namespace"] == CONTROLLERS, (kind, name)
    settings = controller_settings()
    assert settings.controller.lease_namespace == CONTROLLERS == Settings().controller.lease_namespace


def test_the_controller_pod_meets_pod_security_restricted():
    """The checks of the Pod Security Standards' restricted profile that a manifest can fail (Kubernetes docs,
    "Pod Security Standards"): volume types, non-root, no privilege escalation, ALL capabilities dropped (only
    NET_BIND_SERVICE may be added back), a RuntimeDefault or Localhost seccomp profile; no host namespaces."""
    pod = documents("deploy/controller.yaml")[("Deployment", "gpu-watchdog-controller")]["spec"]["template"]["spec"]
    allowed = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
               "secret"}
    assert all(set(volume) - {"name"} <= allowed for volume in pod["volumes"])
    assert not any(pod.get(key) for key in ("hostNetwork", "hostPID", "hostIPC"))
    pod_context = pod.get("securityContext") or {}
    for container in pod["containers"]:
        context = {**pod_context, **(container.get("securityContext") or {})}
        assert context["runAsNonRoot"] is True and context.get("runAsUser", 1) != 0
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"] and set(context["capabilities"].get("add", [])) <= {
            "NET_BIND_SERVICE"}
        assert context["seccompProfile"]["type"] in ("RuntimeDefault", "Localhost")
        assert context["readOnlyRootFilesystem"] is True
        assert "controller" in container["image"].rsplit("/", 1)[-1]  # the Dockerfile's non-root target


def test_the_controllers_policy_is_the_agents_policy():
    """A volume mounts only a ConfigMap of its own namespace, so the policy is shipped twice: the copies must agree."""
    agents = documents("deploy/daemonset.yaml")[("ConfigMap", "gpu-watchdog-policy")]
    controller = documents("deploy/controller.yaml")[("ConfigMap", "gpu-watchdog-policy")]
    assert controller["data"] == agents["data"]
    assert (agents["metadata"]["namespace"], controller["metadata"]["namespace"]) == (AGENTS, CONTROLLERS)
