"""deploy/admission-policy.yaml: well-formed as the API server requires it, and its CEL, evaluated by a real CEL
evaluator (cel-python) against admission requests built as the API server builds them, allows the watchdog's
evictions only in opted-in, unprotected namespaces and leaves every other user alone.

What the API server hands the expressions (Kubernetes docs, "Validating Admission Policy", CEL variables): `request`
(the admission.k8s.io/v1 AdmissionRequest attributes), `object` (for pods/eviction the policy/v1 Eviction, not the
pod), `oldObject` (null on CREATE), `namespaceObject` (the request's Namespace), `params` (null without paramKind)
and `variables`. A matchCondition false → the policy does not apply; a validation false → denied; an evaluation
error → failurePolicy (Fail: denied). This harness applies those rules, the resource match included.
"""

from __future__ import annotations

import re
from pathlib import Path

import celpy
import pytest
import yaml

from watchdog.config import Policy

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
EVICTABLE = "gpu-watchdog.io/evictable"
AGENT = "system:serviceaccount:gpu-watchdog:gpu-watchdog"
CONTROLLER = "system:serviceaccount:gpu-watchdog-controller:gpu-watchdog-controller"


def documents(name: str) -> dict[tuple[str, str], dict]:
    docs = [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


POLICY = documents("admission-policy.yaml")
VAP = POLICY[("ValidatingAdmissionPolicy", "gpu-watchdog-evictions")]
BINDING = POLICY[("ValidatingAdmissionPolicyBinding", "gpu-watchdog-evictions")]
CEL = celpy.Environment()


def evaluate(expression: str, activation: dict):
    """The expression's value, or the CELEvalError it produced (cel-python returns some errors as values)."""
    program = CEL.program(CEL.compile(expression))
    try:
        return program.evaluate(activation)
    except celpy.CELEvalError as error:
        return error


def matches_resource(request: dict, policy: dict) -> bool:
    resource = request["resource"]["resource"] + (f"/{request['subResource']}" if request.get("subResource") else "")
    return any(
        request["resource"]["group"] in rule["apiGroups"] and request["resource"]["version"] in rule["apiVersions"]
        and request["operation"] in rule["operations"] and resource in rule["resources"]
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
    )


def admit(request: dict, obj: dict | None, namespace: dict | None, *, policy: dict = VAP) -> tuple[str, str]:
    """("not matched" | "allowed" | "denied", message), as the API server's plugin would decide for ``policy``."""
    if not matches_resource(request, policy):
        return "not matched", ""
    activation = dict(celpy.json_to_cel({"request": request, "object": obj, "oldObject": None,
                                         "namespaceObject": namespace, "params": None}))
    for condition in policy["spec"].get("matchConditions", []):
        value = evaluate(condition["expression"], activation)
        if isinstance(value, celpy.CELEvalError):
            return "denied", f"matchCondition {condition['name']} failed: {value}"  # failurePolicy Fail
        if not bool(value):
            return "not matched", ""
    variables = {}
    for variable in policy["spec"].get("variables", []):
        variables[variable["name"]] = evaluate(variable["expression"], {**activation, "variables": variables})
        if isinstance(variables[variable["name"]], celpy.CELEvalError):
            return "denied", f"variable {variable['name']} failed"
    activation["variables"] = celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()})
    for validation in policy["spec"]["validations"]:
        value = evaluate(validation["expression"], activation)
        if isinstance(value, celpy.CELEvalError) or not bool(value):
            message = validation.get("message") or str(evaluate(validation["messageExpression"], activation))
            return "denied", message
    return "allowed", ""


def eviction_request(*, namespace: str, user: str, pod: str = "batch-0", dry_run: bool = False,
                     operation: str = "CREATE", labels: dict[str, str] | None = None,
                     no_labels: bool = False) -> tuple[dict, dict | None, dict]:
    """An admission request for POST .../namespaces/<ns>/pods/<pod>/eviction (or a pod DELETE), with the Eviction
    body and the Namespace; the API server sets kubernetes.io/metadata.name on every Namespace (1.21+)."""
    sa_namespace = user.split(":")[2] if user.startswith("system:serviceaccount:") else ""
    request = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "subResource": "eviction" if operation == "CREATE" else "",
        "requestKind": {"group": "policy", "version": "v1", "kind": "Eviction"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "requestSubResource": "eviction" if operation == "CREATE" else "",
        "name": pod,
        "namespace": namespace,
        "operation": operation,
        "userInfo": {
            "username": user,
            "uid": "b9e8c8ae-8d41-4d6f-a0b2-4b5f3f1c2d3e",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{sa_namespace}", "system:authenticated"]
            if sa_namespace else ["system:masters", "system:authenticated"],
            "extra": {"authentication.kubernetes.io/node-name": ["gpu-node-1"]} if sa_namespace else {},
        },
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    if operation != "CREATE":
        request["kind"] = request["requestKind"] = {"group": "", "version": "v1", "kind": "Pod"}
        request["options"] = {"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions"}
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace},
                "deleteOptions": {"gracePeriodSeconds": 30}} if operation == "CREATE" else None
    metadata = {"name": namespace}
    if not no_labels:
        metadata["labels"] = {"kubernetes.io/metadata.name": namespace, **(labels or {})}
    return request, eviction, {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


OPTED_IN = {EVICTABLE: "true"}


@pytest.mark.parametrize("user", [AGENT, CONTROLLER])
@pytest.mark.parametrize("dry_run", [False, True])
def test_the_watchdog_may_evict_in_an_opted_in_namespace(user, dry_run):
    assert admit(*eviction_request(namespace="team-a", user=user, labels=OPTED_IN, dry_run=dry_run)) == (
        "allowed", "")


@pytest.mark.parametrize("user", [AGENT, CONTROLLER])
@pytest.mark.parametrize("namespace", ["kube-system", "kube-public", "kube-node-lease", "gpu-watchdog",
                                       "gpu-watchdog-controller"])
def test_protected_namespaces_are_denied_even_when_labelled(user, namespace):
    decision, message = admit(*eviction_request(namespace=namespace, user=user, labels=OPTED_IN))
    assert decision == "denied" and message == f"gpu-watchdog may not evict in the protected namespace {namespace}"


@pytest.mark.parametrize("labels", [{}, {EVICTABLE: "false"}, {EVICTABLE: "True"}, {"evictable": "true"}, None])
def test_a_namespace_that_did_not_opt_in_is_denied(labels):
    request = eviction_request(namespace="team-b", user=AGENT, labels=labels, no_labels=labels is None, dry_run=True)
    decision, message = admit(*request)
    assert decision == "denied" and "team-b" in message and EVICTABLE in message


def test_deleting_a_pod_is_bounded_too():
    assert admit(*eviction_request(namespace="team-b", user=AGENT, operation="DELETE"))[0] == "denied"
    assert admit(*eviction_request(namespace="team-a", user=AGENT, operation="DELETE", labels=OPTED_IN))[0] == (
        "allowed")


@pytest.mark.parametrize("user", ["kubernetes-admin", "system:serviceaccount:kube-system:descheduler",
                                  "system:serviceaccount:gpu-watchdog:default",
                                  "system:serviceaccount:team-a:gpu-watchdog"])
def test_other_users_are_not_matched(user):
    assert admit(*eviction_request(namespace="kube-system", user=user)) == ("not matched", "")


def test_other_resources_are_not_matched():
    request, _, namespace = eviction_request(namespace="kube-system", user=AGENT)
    request = {**request, "subResource": "", "kind": {"group": "", "version": "v1", "kind": "Pod"}}
    assert admit(request, {"kind": "Pod"}, namespace) == ("not matched", "")  # CREATE pods, not pods/eviction


def test_the_matched_identities_are_the_deployed_service_accounts():
    rbac = documents("rbac.yaml")
    accounts = {f"system:serviceaccount:{d['metadata']['namespace']}:{name}"
                for (kind, name), d in rbac.items() if kind == "ServiceAccount"}
    assert accounts == {AGENT, CONTROLLER}
    for account in accounts:
        assert admit(*eviction_request(namespace="team-a", user=account, labels=OPTED_IN))[0] == "allowed"
        assert admit(*eviction_request(namespace="team-a", user=account))[0] == "denied"


def test_everything_the_agents_protect_the_api_server_protects():
    """Config adds protections; the admission policy repeats the invariants: kube-system, both project namespaces
    and every namespace the shipped policy protects are denied even with the opt-in label."""
    namespaces = {name for (kind, name) in documents("rbac.yaml") if kind == "Namespace"}
    shipped = documents("daemonset.yaml")[("ConfigMap", "gpu-watchdog-policy")]["data"]["policy.yaml"]
    protected = set(Policy.model_validate(yaml.safe_load(shipped)).action.protected_namespaces)
    assert {"gpu-watchdog", "gpu-watchdog-controller"} <= namespaces
    for namespace in namespaces | protected | {"kube-system"}:
        assert admit(*eviction_request(namespace=namespace, user=AGENT, labels=OPTED_IN))[0] == "denied", namespace


def test_the_policy_and_binding_are_what_the_api_server_accepts():
    """admissionregistration.k8s.io/v1 (GA in 1.30); the fields the API server validates on create
    (pkg/apis/admissionregistration/validation/validation.go): failurePolicy, rules, names, reasons, actions."""
    assert VAP["apiVersion"] == BINDING["apiVersion"] == "admissionregistration.k8s.io/v1"
    spec = VAP["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert "paramKind" not in spec and "paramRef" not in BINDING["spec"]  # params would be null in the CEL above
    rules = spec["matchConstraints"]["resourceRules"]
    assert {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods/eviction"]} in rules
    identifier = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # a variable is referenced as variables.<name>
    assert all(identifier.match(v["name"]) for v in spec["variables"])
    qualified = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")  # matchConditions[].name
    assert all(qualified.match(c["name"]) and len(c["name"]) <= 63 for c in spec["matchConditions"])
    for validation in spec["validations"]:
        assert validation["expression"] and (validation.get("message") or validation.get("messageExpression"))
        assert validation.get("reason", "Invalid") in {"Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge"}
    assert BINDING["spec"]["policyName"] == VAP["metadata"]["name"]
    assert BINDING["spec"]["validationActions"] == ["Deny"]
    assert "matchResources" not in BINDING["spec"]  # the policy's own match applies, cluster-wide
    for text in [c["expression"] for c in spec["matchConditions"]] + [v["expression"] for v in spec["variables"]] \
            + [v["expression"] for v in spec["validations"]] + [v["messageExpression"] for v in spec["validations"]]:
        CEL.compile(text)  # every expression parses
