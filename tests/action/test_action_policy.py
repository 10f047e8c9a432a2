"""The action policy model: safe defaults, per-kind lookup, runtime namespace, errors that name the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from watchdog.action import effective_policy
from watchdog.config.action import ActionPolicy
from watchdog.model import REPORT_ONLY_KINDS, FindingKind, Mode


def test_defaults_are_the_safe_ones():
    policy = ActionPolicy()
    assert policy.mode is Mode.DRY_RUN and policy.priority_floor == 1_000_000
    assert policy.protected_namespaces == ("kube-system",)
    assert policy.protected_annotation == "gpu-watchdog.io/protected"
    assert policy.for_kind(FindingKind.XID).enabled is False
    # every kind that may be an eviction reason, except Xid, is on by default (report-only kinds have no policy)
    actionable = [k for k in FindingKind if k is not FindingKind.XID and k not in REPORT_ONLY_KINDS]
    assert all(policy.for_kind(k).enabled for k in actionable)
    assert (policy.retry_backoff_initial_seconds, policy.retry_backoff_max_seconds) == (30.0, 600.0)
    assert policy.kill_switch.key == "paused"


def test_own_namespace_added_once():
    policy = ActionPolicy().with_own_namespace("gpu-watchdog")
    assert policy.protected_namespaces == ("kube-system", "gpu-watchdog")
    assert policy.with_own_namespace("gpu-watchdog") is policy and policy.with_own_namespace(None) is policy


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"mode": "yolo"}, "mode"),
        ({"quota": {"for_seconds": -1}}, "quota.for_seconds"),
        ({"node_eviction_burst": 0}, "node_eviction_burst"),
        ({"xid": {"drain": True}}, "xid.drain"),
        ({"kill_switch": {"name": ""}}, "kill_switch.name"),
        ({"kill_switch": {"stale_after_refreshes": 0}}, "kill_switch.stale_after_refreshes"),
    ],
)
def test_bad_values_name_the_field(data, field):
    with pytest.raises(ValidationError) as caught:
        ActionPolicy.model_validate(data)
    assert field in {".".join(str(p) for p in e["loc"]) for e in caught.value.errors()}


def test_effective_policy_is_the_runtime_overlay():
    policy = effective_policy(ActionPolicy(), own_namespace="gpu-watchdog", tenant_label="team")
    assert policy.protected_namespaces == ("kube-system", "gpu-watchdog") and policy.tenant_label == "team"
    own = ActionPolicy(tenant_label="tenant")
    assert effective_policy(own, own_namespace=None, tenant_label="team").tenant_label == "tenant"  # policy wins
    assert effective_policy(own, own_namespace=None, tenant_label=None) is own
