"""deploy/admission-policy.yaml, Dynamic Resource Allocation part: gpu-watchdog's service accounts may read DRA
objects (the agent reads its node's ResourceSlices) and never write one; everyone else (the scheduler, the DRA
driver, the resourceclaim controller, users) is left alone. Evaluated with the same CEL harness as the evictions'
policy (tests/test_admission_policy.py)."""

from __future__ import annotations

import pytest

from tests.test_admission_policy import AGENT, CEL, CONTROLLER, POLICY, admit, documents, eviction_request

DRA = POLICY[("ValidatingAdmissionPolicy", "gpu-watchdog-dra-read-only")]
DRA_BINDING = POLICY[("ValidatingAdmissionPolicyBinding", "gpu-watchdog-dra-read-only")]
NAMESPACED = {"resourceclaims", "resourceclaimtemplates"}


def dra_request(*, resource: str, operation: str, user: str, sub_resource: str = "") -> tuple[dict, dict, dict]:
    """An admission request for a resource.k8s.io/v1 object, as the API server builds it."""
    kind = {"resourceclaims": "ResourceClaim", "resourceclaimtemplates": "ResourceClaimTemplate",
            "resourceslices": "ResourceSlice", "deviceclasses": "DeviceClass"}[resource]
    namespace = "team-a" if resource in NAMESPACED else ""
    request = {
        "uid": "0c5a3a5e-9a51-4d0b-8f0c-4e1f5d1e2a3b",
        "kind": {"group": "resource.k8s.io", "version": "v1", "kind": kind},
        "resource": {"group": "resource.k8s.io", "version": "v1", "resource": resource},
        "subResource": sub_resource,
        "name": "gpu-claim",
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "dryRun": False,
    }
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": kind, "metadata": {"name": "gpu-claim"}}
    space = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace or "none"}}
    return request, (None if operation == "DELETE" else obj), space


@pytest.mark.parametrize("user", [AGENT, CONTROLLER])
@pytest.mark.parametrize("resource", ["resourceclaims", "resourceclaimtemplates", "resourceslices", "deviceclasses"])
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
def test_the_watchdog_may_not_write_dra_objects(user, resource, operation):
    decision, message = admit(*dra_request(resource=resource, operation=operation, user=user), policy=DRA)
    assert decision == "denied"
    assert message == f"gpu-watchdog only reads Dynamic Resource Allocation objects: {operation} on {resource} denied"


@pytest.mark.parametrize("user", [AGENT, CONTROLLER])
def test_a_claims_status_is_not_the_watchdogs_to_write(user):
    # status.allocation and status.reservedFor decide which pod holds which device (resource.k8s.io/v1).
    request = dra_request(resource="resourceclaims", operation="UPDATE", user=user, sub_resource="status")
    assert admit(*request, policy=DRA)[0] == "denied"


@pytest.mark.parametrize("user", ["system:kube-scheduler", "system:serviceaccount:kube-system:resourceclaim-controller",
                                  "system:serviceaccount:nvidia-dra-driver-gpu:nvidia-dra-driver-gpu-service-account",
                                  "system:serviceaccount:gpu-watchdog:default", "kubernetes-admin"])
def test_the_scheduler_the_driver_and_users_are_not_matched(user):
    for resource in ("resourceclaims", "resourceslices"):
        assert admit(*dra_request(resource=resource, operation="UPDATE", user=user), policy=DRA) == ("not matched", "")


def test_the_two_policies_do_not_overlap():
    assert admit(*eviction_request(namespace="team-a", user=AGENT), policy=DRA) == ("not matched", "")
    assert admit(*dra_request(resource="resourceslices", operation="DELETE", user=AGENT)) == ("not matched", "")


def test_the_dra_policy_is_what_the_api_server_accepts_and_rbac_grants_no_dra_writes():
    assert DRA["apiVersion"] == DRA_BINDING["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert DRA["spec"]["failurePolicy"] == "Fail" and "paramKind" not in DRA["spec"]
    assert DRA_BINDING["spec"] == {"policyName": DRA["metadata"]["name"], "validationActions": ["Deny"]}
    for validation in DRA["spec"]["validations"]:
        CEL.compile(validation["expression"])
        CEL.compile(validation["messageExpression"])
        assert validation["reason"] == "Forbidden"
    roles = [d for (kind, _), d in documents("rbac.yaml").items() if kind in ("Role", "ClusterRole")]
    granted = {(verb, resource) for role in roles for rule in role["rules"] if "resource.k8s.io" in rule["apiGroups"]
               for verb in rule["verbs"] for resource in rule["resources"]}
    # The agent lists/watches its slices, the controller's audit lists claims (watchdog.kube.permissions): reads.
    assert granted == {("list", "resourceslices"), ("watch", "resourceslices"), ("list", "resourceclaims")}
