"""The manifests in deploy/ hold settings and policies the agent accepts, ship no kill switch to overwrite, run the
agent with no capability and turn the cluster-wide budget on; the Dockerfile pins its base and runs the controller
as a numeric non-root user."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from watchdog.config import Policy, check_file
from watchdog.kube.eviction_budget import DATA_KEY

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def documents():
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path.name, doc


def test_every_mounted_settings_or_policy_file_validates(tmp_path):
    checked = 0
    for name, doc in documents():
        if doc.get("kind") != "ConfigMap":
            continue
        for key, text in (doc.get("data") or {}).items():
            if key.endswith(".yaml"):
                path = tmp_path / f"{name}-{key}"
                path.write_text(text)
                kind, problems = check_file(path)
                assert problems == [], (name, key, problems)
                checked += 1
    assert checked >= 2


def test_the_kill_switch_is_never_shipped_in_a_manifest():
    names = {doc["metadata"]["name"] for _, doc in documents() if doc.get("kind") == "ConfigMap"}
    assert "gpu-watchdog-kill-switch" not in names  # re-applying must not undo an operator's pause


def test_no_role_grants_the_same_permission_twice():
    """A rule repeated (or one permission granted by two rules of one role) drifts apart from its copy in review."""
    checked = 0
    for name, doc in documents():
        if doc.get("kind") not in ("ClusterRole", "Role"):
            continue
        rules = [yaml.safe_dump(rule, sort_keys=True) for rule in doc["rules"]]
        assert len(rules) == len(set(rules)), (name, doc["metadata"]["name"], "a rule is repeated")
        grants = [(group, resource, verb, tuple(rule.get("resourceNames", ()))) for rule in doc["rules"]
                  for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]]
        twice = {grant for grant in grants if grants.count(grant) > 1}
        assert not twice, (name, doc["metadata"]["name"], sorted(twice))
        checked += 1
    assert checked >= 4


def test_the_agents_priority_class_has_a_resource_quota_selecting_it_applied_before_the_daemonset():
    """system-node-critical outside kube-system: where ResourceQuota admission limits the class by default (GKE), a
    pod of it is admitted only in a namespace holding a quota whose scopeSelector selects the class."""
    in_file = [doc for where, doc in documents() if where == "daemonset.yaml"]
    daemonset = named("DaemonSet", "gpu-watchdog", "daemonset.yaml")
    priority_class = daemonset["spec"]["template"]["spec"]["priorityClassName"]
    [quota] = [doc for doc in in_file if doc["kind"] == "ResourceQuota"]
    assert quota["metadata"]["namespace"] == daemonset["metadata"]["namespace"]
    assert quota["spec"]["scopeSelector"]["matchExpressions"] == [
        {"scopeName": "PriorityClass", "operator": "In", "values": [priority_class]}]
    assert "hard" not in quota["spec"]  # it admits the class; it caps nothing
    assert in_file.index(quota) < in_file.index(daemonset)  # `kubectl apply -f` creates it first


def named(kind: str, name: str, file: str) -> dict:
    return next(doc for where, doc in documents() if where == file and doc["kind"] == kind
                and doc["metadata"]["name"] == name)


def test_the_agent_runs_as_root_without_capabilities_or_escalation():
    """uid 0 is what the kubelet socket and the NVIDIA device nodes check; no capability is added on top, and no
    process in the container can gain privileges (no_new_privs)."""
    pod = named("DaemonSet", "gpu-watchdog", "daemonset.yaml")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["readOnlyRootFilesystem"] is True and context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not context.get("privileged") and not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert all(m.get("readOnly") for m in container["volumeMounts"] if m["name"] in ("pod-resources", "host-proc"))
    assert {doc["metadata"]["namespace"] for where, doc in documents() if where == "daemonset.yaml"} == {
        "gpu-watchdog"}


def test_the_shipped_policy_turns_the_cluster_budget_on_and_ships_its_empty_object():
    text = named("ConfigMap", "gpu-watchdog-policy", "daemonset.yaml")["data"]["policy.yaml"]
    budget = Policy.model_validate(yaml.safe_load(text)).action.cluster_budget
    assert budget.enabled and budget.max_evictions >= 1 and budget.namespace in (None, "gpu-watchdog")
    shipped = named("ConfigMap", budget.name, "daemonset.yaml")
    assert shipped["metadata"]["namespace"] == "gpu-watchdog"
    assert DATA_KEY not in (shipped.get("data") or {})  # re-applying the manifest never resets the window


# ---------------------------------------------------------------- the images (Dockerfile)

DOCKERFILE = DEPLOY.parent / "Dockerfile"


def stages() -> dict[str, list[str]]:
    """Build stage name → its instructions (continuation lines joined, comments dropped)."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found: dict[str, list[str]] = {}
    current = None
    for line in (raw.strip() for raw in text.splitlines()):
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            parts = line.split()
            current = parts[3] if len(parts) >= 4 and parts[2].upper() == "AS" else f"stage{len(found)}"
            found[current] = []
        found[current].append(line)
    return found


def test_base_images_are_pinned_to_a_release():
    for name, lines in stages().items():
        image = lines[0].split()[1]
        if image in stages():
            continue  # FROM an earlier stage
        repository, _, tag = image.partition("@")[0].rpartition(":")
        assert repository and re.fullmatch(r"\d+\.\d+\.\d+-[a-z]+(-[a-z]+)?", tag), (name, image)  # 3.12.11-slim-…


def test_the_controller_image_runs_as_a_numeric_non_root_user_and_the_agent_says_why_root():
    found = stages()
    users = [line.split()[1] for line in found["controller"] if line.upper().startswith("USER ")]
    assert users, "the controller target sets no USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0  # numeric: runAsNonRoot can be checked without /etc/passwd
    assert list(found)[-1] == "agent"  # `docker build .` still builds the agent
    agent_users = [line.split()[1] for line in found["agent"] if line.upper().startswith("USER ")]
    assert agent_users and agent_users[-1].split(":")[0] == "0"
    text = DOCKERFILE.read_text()
    assert "pod-resources" in text and "/proc/<pid>/cgroup" in text  # why the agent keeps uid 0


def test_hadolint_finds_nothing():
    hadolint = Path(sys.executable).with_name("hadolint")
    result = subprocess.run([str(hadolint), "--failure-threshold", "info", str(DOCKERFILE)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
