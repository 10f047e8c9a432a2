"""KubeVirt's answers to a virt-launcher pod's eviction, as the API server words them, mapped to results: an
evacuation is `migrating` (or `dry_run` in a dry run), a refusal `blocked` with KubeVirt's reason; never a PDB
refusal, never the API server's throttling, never an error. Messages are those of kubevirt/kubevirt
pkg/virt-api/webhooks/validating-webhook/admitters/pod-eviction-admitter.go behind the API server's prefix."""

from __future__ import annotations

import pytest

from watchdog.kube.eviction import classify_eviction
from watchdog.model import EvictionResult as R

PREFIX = 'admission webhook "virt-launcher-eviction-interceptor.kubevirt.io" denied the request: '
TRIGGERED = 'Eviction triggered evacuation of VMI "default/vm-cirros"'


def denial(message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 429, "reason": "TooManyRequests",
            "message": PREFIX + message}


def test_an_evacuation_is_a_live_migration():
    reply = classify_eviction(429, denial(TRIGGERED), dry_run=False)
    assert reply.result is R.MIGRATING and reply.http_status == 429
    assert "default/vm-cirros" in reply.message and "requested" in reply.message


def test_an_evacuation_in_progress_is_a_migration_under_way():
    reply = classify_eviction(429, denial("Evacuation in progress: " + TRIGGERED), dry_run=False)
    assert reply.result is R.MIGRATING and "already in progress" in reply.message


def test_a_dry_run_says_what_would_happen():
    # markVMI skips the patch in a dry run, and the webhook answers as if it had marked.
    reply = classify_eviction(429, denial(TRIGGERED), dry_run=True)
    assert reply.result is R.DRY_RUN and reply.message.startswith("would live-migrate VMI default/vm-cirros")


@pytest.mark.parametrize("message", [
    "VMI vm-cirros is configured with an eviction strategy but is not live-migratable",
    "Eviction request for target Pod",
    'kubevirt failed getting the vmi: virtualmachineinstances.kubevirt.io "vm-cirros" not found',
    "kubevirt failed marking the vmi for eviction: the server is currently unable to handle the request",
])
@pytest.mark.parametrize("dry_run", [False, True])
def test_kubevirt_refusals_are_blocked_with_its_reason(message, dry_run):
    reply = classify_eviction(429, denial(message), dry_run=dry_run)
    assert reply.result is R.BLOCKED
    assert reply.message == f"refused by KubeVirt: {message}"


def test_another_webhooks_429_is_a_refusal_not_throttling():
    body = {"code": 429, "message": 'admission webhook "quota.example.com" denied the request: over budget'}
    reply = classify_eviction(429, body, dry_run=False)
    assert reply.result is R.BLOCKED and "quota.example.com" in reply.message


def test_throttling_and_pdbs_keep_their_results():
    assert classify_eviction(429, {"message": "Too many requests"}, dry_run=False).result is R.RATE_LIMITED
    pdb = {"message": "Cannot evict pod as it would violate the pod's disruption budget.",
           "details": {"causes": [{"reason": "DisruptionBudget", "message": "needs 1 healthy"}]}}
    assert classify_eviction(429, pdb, dry_run=False).result is R.BLOCKED_PDB


def test_a_webhooks_429_without_explanation_is_a_refusal_not_throttling():
    # apiserver admission/plugin/webhook/errors ToStatusErr words a denial with no message and no reason
    # 'admission webhook "<name>" denied the request without explanation', keeping the webhook's 429.
    body = {"code": 429, "message": 'admission webhook "quota.example.com" denied the request without explanation'}
    reply = classify_eviction(429, body, dry_run=False)
    assert reply.result is R.BLOCKED
    assert reply.message == "refused by admission webhook quota.example.com: no reason given"
