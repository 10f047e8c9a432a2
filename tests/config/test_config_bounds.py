"""Bounded configuration: a size cap on files (checked before parsing), caps on the maps and lists a user fills,
Kubernetes name syntax for every object name, and configuration text cut before it is logged or served — at start,
in `check-config` and on reload alike."""

from __future__ import annotations

import asyncio
import logging

import pytest

import watchdog.config.loading as loading
from watchdog.cli import main
from watchdog.config import ConfigError, Policy, load_policy, load_settings
from watchdog.config.loading import validate
from watchdog.service.policy_watch import PolicyWatcher

MIB = 1024 * 1024
TEN_MB = 10 * MIB


@pytest.fixture
def no_big_parse(monkeypatch):
    """Fail any attempt to parse more than 2 MiB of YAML: an oversized file must be refused before it is parsed
    (and the old code, which parsed 10 MB in most of a minute, fails here at once instead)."""
    parse = loading.parse_yaml

    def guarded(text):
        assert len(text) <= 2 * MIB, f"parsed {len(text)} characters of YAML"
        return parse(text)

    monkeypatch.setattr(loading, "parse_yaml", guarded)


def ten_mb_policy(tmp_path):
    """A 10 MB policy of ~190k tenants, as a generated file gone wrong would be."""
    path = tmp_path / "policy.yaml"
    line = b"      tenant-%06d: {gpu_memory_bytes: 1000000000}\n"
    body = b"".join(line % i for i in range(TEN_MB // len(line % 0) + 1))
    path.write_bytes(b"detection:\n  quota:\n    tenants:\n" + body)
    assert path.stat().st_size > TEN_MB
    return path


def problem_fields(exc: ConfigError) -> list[str]:
    return [field for field, _ in exc.problems]


# ------------------------------------------------------------------------------------------------ file size


def test_a_10_mb_policy_is_refused_unparsed_naming_its_size_and_the_cap(tmp_path, no_big_parse):
    path = ten_mb_policy(tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_policy(path)
    message = str(caught.value)
    assert str(path) in message and str(path.stat().st_size) in message and "1048576 bytes (1 MiB)" in message


def test_a_settings_file_over_the_cap_is_refused_and_one_at_the_cap_is_read(tmp_path, no_big_parse):
    from watchdog.config.limits import MAX_FILE_BYTES
    from watchdog.config.loading import OversizedFile, read_yaml

    assert MAX_FILE_BYTES == MIB
    path = tmp_path / "settings.yaml"
    head = b"publishing: {port: 9100}\n"
    path.write_bytes(head + b"#" * (100 - len(head)))  # exactly the cap: a comment pads it
    assert read_yaml(path, max_bytes=100) == {"publishing": {"port": 9100}}
    path.write_bytes(head + b"#" * (101 - len(head)))
    with pytest.raises(OversizedFile, match="101 bytes, over the limit of 100 bytes"):
        read_yaml(path, max_bytes=100)
    path.write_bytes(head + b"#" * (MAX_FILE_BYTES - len(head) + 1))
    with pytest.raises(ConfigError, match=f"{MAX_FILE_BYTES + 1} bytes, over the limit of {MAX_FILE_BYTES}"):
        load_settings(path, environ={})


def test_the_agent_refuses_to_start_on_a_10_mb_policy(tmp_path, capsys, no_big_parse):
    path = ten_mb_policy(tmp_path)
    assert main(["run", "--simulate", "scenarios/demo.yaml", "--policy", str(path), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: {path.stat().st_size} bytes, over the limit of 1048576 bytes" in err


def test_check_config_refuses_a_10_mb_file_with_exit_2(tmp_path, capsys, no_big_parse):
    path = ten_mb_policy(tmp_path)
    assert main(["check-config", str(path)]) == 2
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: {path.stat().st_size} bytes, over the limit of 1048576 bytes") and len(out) < 300


# ------------------------------------------------------------------------------------------------ map and list caps


def test_more_tenants_than_the_cap_are_refused_naming_the_field():
    from watchdog.config.limits import MAX_TENANTS

    tenants = {f"t{i}": {} for i in range(MAX_TENANTS)}
    assert len(validate(Policy, {"detection": {"quota": {"tenants": tenants}}}, source="p").detection.quota.tenants) \
        == MAX_TENANTS
    tenants["one-too-many"] = {}
    with pytest.raises(ConfigError) as caught:
        validate(Policy, {"detection": {"quota": {"tenants": tenants}}}, source="p")
    assert caught.value.problems == [("detection.quota.tenants",
                                      f"Dictionary should have at most {MAX_TENANTS} items after validation, not more")]


def test_check_config_refuses_a_policy_file_with_too_many_tenants(tmp_path, capsys):
    from watchdog.config.limits import MAX_TENANTS

    path = tmp_path / "policy.yaml"
    tenants = ", ".join(f"t{i}: {{}}" for i in range(MAX_TENANTS + 1))
    path.write_text("detection: {quota: {tenants: {" + tenants + "}}}\n")
    assert main(["check-config", str(path)]) == 1
    assert f"  detection.quota.tenants: Dictionary should have at most {MAX_TENANTS} items" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"action": {"protected_namespaces": [f"ns-{i}" for i in range(1_001)]}}, "action.protected_namespaces"),
        ({"detection": {"unauthorized": {"exempt_namespaces": [f"ns-{i}" for i in range(1_001)]}}},
         "detection.unauthorized.exempt_namespaces"),
        ({"detection": {"unauthorized": {"exempt_labels": {f"k{i}": "v" for i in range(65)}}}},
         "detection.unauthorized.exempt_labels"),
        ({"detection": {"unauthorized": {"exempt_commands": ["x"] * 257}}}, "detection.unauthorized.exempt_commands"),
        ({"detection": {"unauthorized": {"exempt_cgroups": ["x" * 4097]}}}, "detection.unauthorized.exempt_cgroups.0"),
        ({"detection": {"xid": {"ignore": list(range(1_000, 2_025))}}}, "detection.xid.ignore"),
        ({"detection": {"victim_signal_overrides": {f"t{i}": {"query": "up"} for i in range(1_001)}}},
         "detection.victim_signal_overrides"),
        ({"detection": {"victim_signal_overrides": {"t": {"query": "x" * 4097}}}},
         "detection.victim_signal_overrides.t.query"),
        ({"detection": {"quota": {"tenants": {"t": {"instances": {f"{i}g.10gb": 1 for i in range(257)}}}}}},
         "detection.quota.tenants.t.instances"),
    ],
    ids=["protected-namespaces", "exempt-namespaces", "exempt-labels", "exempt-commands", "cgroup-pattern-length",
         "xids", "signal-overrides", "query-length", "profiles"],
)
def test_every_list_and_map_a_user_fills_is_capped(data, field):
    with pytest.raises(ConfigError) as caught:
        validate(Policy, data, source="p")
    assert problem_fields(caught.value) == [field]


# ------------------------------------------------------------------------------------------------ Kubernetes names


@pytest.mark.parametrize(
    ("yaml_text", "field", "rule"),
    [
        ('action: {kill_switch: {name: "../../pods/x?watch=1"}}', "action.kill_switch.name", "object name"),
        ('action: {kill_switch: {namespace: "Not A Namespace"}}', "action.kill_switch.namespace", "namespace name"),
        ('action: {kill_switch: {key: "a/b"}}', "action.kill_switch.key", "ConfigMap key"),
        ('action: {cluster_budget: {name: "Budget"}}', "action.cluster_budget.name", "object name"),
        ('action: {cluster_budget: {namespace: "a.b"}}', "action.cluster_budget.namespace", "namespace name"),
        ('action: {protected_namespaces: [kube-system, "-x"]}', "action.protected_namespaces.1", "namespace name"),
        ('action: {tenant_label: "team label"}', "action.tenant_label", "label or annotation key"),
        ('action: {protected_annotation: "example.com/"}', "action.protected_annotation", "label or annotation key"),
        ('detection: {quota: {tenants: {"Bad Tenant": {}}}}', "detection.quota.tenants.Bad Tenant.[key]",
         "label value"),
        ('detection: {unauthorized: {exempt_namespaces: ["ns/x"]}}', "detection.unauthorized.exempt_namespaces.0",
         "namespace name"),
        ('detection: {unauthorized: {exempt_labels: {"a/b/c": x}}}', "detection.unauthorized.exempt_labels.a/b/c.[key]",
         "label or annotation key"),
        ('detection: {unauthorized: {exempt_labels: {app: "-bad"}}}', "detection.unauthorized.exempt_labels.app",
         "label value"),
        ('detection: {victim_signal_overrides: {"t?x": {query: up}}}', "detection.victim_signal_overrides.t?x.[key]",
         "label value"),
    ],
)
def test_names_that_no_kubernetes_object_can_have_are_refused_with_the_field(tmp_path, yaml_text, field, rule):
    path = tmp_path / "policy.yaml"
    path.write_text(yaml_text + "\n")
    with pytest.raises(ConfigError) as caught:
        load_policy(path)
    assert problem_fields(caught.value) == [field]
    assert f"is not a {rule}" in caught.value.problems[0][1] or f"is not an {rule}" in caught.value.problems[0][1]


def test_check_config_refuses_the_same_names(tmp_path, capsys):
    path = tmp_path / "policy.yaml"
    path.write_text('action: {kill_switch: {name: "../../pods/x?watch=1", namespace: "Not A Namespace"}}\n')
    assert main(["check-config", str(path)]) == 1
    out = capsys.readouterr().out
    assert "  action.kill_switch.name: Value error, '../../pods/x?watch=1' is not an object name" in out
    assert "  action.kill_switch.namespace: Value error, 'Not A Namespace' is not a namespace name" in out


def test_settings_names_are_checked_too():
    with pytest.raises(ConfigError) as caught:
        load_settings(environ={"GPU_WATCHDOG_NAMESPACE": "Not A Namespace", "GPU_WATCHDOG_NODE_NAME": "node_1",
                               "GPU_WATCHDOG_CONTROLLER__LEASE_NAME": "../lease",
                               "GPU_WATCHDOG_ATTRIBUTION__TENANT_LABEL": "a b"})
    assert sorted(problem_fields(caught.value)) == ["attribution.tenant_label", "controller.lease_name", "namespace",
                                                    "node_name"]


def test_real_names_pass():
    policy = validate(Policy, {
        "action": {"kill_switch": {"name": "gpu-watchdog.kill-switch", "namespace": "ops-1", "key": "paused.v1"},
                   "protected_namespaces": ["kube-system", "0-numeric-start"],
                   "tenant_label": "example.com/team", "protected_annotation": "a.b/Protected_1"},
        "detection": {"quota": {"tenants": {"Team_A.1": {"instances": {"1g.10gb+me": 1, "1c.3g.40gb": 2}}}},
                      "unauthorized": {"exempt_labels": {"app.kubernetes.io/name": "", "tier": "GPU.node"}}},
    }, source="p")
    assert policy.action.kill_switch.name == "gpu-watchdog.kill-switch"
    assert load_settings(environ={"GPU_WATCHDOG_NODE_NAME": "ip-10-0-0-1.ec2.internal"}).node_name.endswith(".internal")


def test_a_10_mb_kill_switch_name_is_refused_without_being_repeated():
    name = "x" * TEN_MB
    with pytest.raises(ConfigError) as caught:
        validate(Policy, {"action": {"kill_switch": {"name": name}}}, source="policy")
    assert problem_fields(caught.value) == ["action.kill_switch.name"]
    assert f"{TEN_MB} characters, more than the 253 of an object name" in caught.value.problems[0][1]
    assert len(str(caught.value)) < 600
    with pytest.raises(ConfigError) as caught:  # the environment reaches the inline policy too
        load_settings(environ={"GPU_WATCHDOG_POLICY__ACTION__KILL_SWITCH__NAME": name})
    assert problem_fields(caught.value) == ["policy.action.kill_switch.name"] and len(str(caught.value)) < 600


def test_an_overlong_map_key_is_cut_in_the_field_path():
    key = "T" * 100_000
    with pytest.raises(ConfigError) as caught:
        validate(Policy, {"detection": {"quota": {"tenants": {key: {}}}}}, source="p")
    (field, reason), = caught.value.problems
    assert field.startswith("detection.quota.tenants.TTT") and field.endswith("….[key]") and len(field) < 120
    assert "100000 characters, more than the 63 of a label value" in reason


# ------------------------------------------------------------------------------------------------ reload


def watcher_on_a_good_policy(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("action: {mode: observe}\n")
    applied, results = [], []
    return path, PolicyWatcher(str(path), apply=applied.append, on_result=results.append), applied, results


RELOADS = {
    "10-mb": (None, "over the limit of 1048576 bytes"),
    "too-many-tenants": ("detection: {quota: {tenants: {" + ", ".join(f"t{i}: {{}}" for i in range(10_001)) + "}}}\n",
                         "detection.quota.tenants: Dictionary should have at most 10000 items"),
    "bad-name": ('action: {kill_switch: {name: "../../pods/x?watch=1"}}\n', "action.kill_switch.name"),
    "bad-namespace": ('action: {kill_switch: {namespace: "Not A Namespace"}}\n', "action.kill_switch.namespace"),
}


@pytest.mark.parametrize("case", RELOADS)
def test_a_reload_refuses_each_and_keeps_the_last_good_policy(tmp_path, caplog, no_big_parse, case):
    path, watcher, applied, results = watcher_on_a_good_policy(tmp_path)
    text, said = RELOADS[case]
    if text is None:
        ten_mb_policy(tmp_path)  # writes policy.yaml
    else:
        path.write_text(text)
    with caplog.at_level(logging.ERROR, logger="watchdog.service.policy_watch"):
        assert asyncio.run(watcher.poll()) is False
    assert applied == [] and results == ["failure"]
    assert "keeping the last good policy" in caplog.text and said in caplog.text
    path.write_text("action: {mode: enforce}\n")  # the next good edit is applied
    assert watcher.check() is True and [p.action.mode.value for p in applied] == ["enforce"]


# ------------------------------------------------------------------------------------------------ text served or logged


def test_bounded_cuts_with_a_mark():
    from watchdog.model.text import MAX_SHOWN_CHARACTERS, bounded

    assert bounded("short") == "short"
    cut = bounded("x" * TEN_MB)
    assert len(cut) == MAX_SHOWN_CHARACTERS and cut.endswith("…") and cut.startswith("xxx")
    assert bounded("abcdef", 4) == "abc…" and bounded("abcd", 4) == "abcd"
    with pytest.raises(ValueError, match="limit"):
        bounded("x", 0)


async def test_a_long_configured_kill_switch_name_is_logged_and_served_cut(caplog):
    from watchdog.action import KillSwitch
    from watchdog.config.action import KillSwitch as KillSwitchSettings

    class Unreadable:
        async def read_kill_switch(self, namespace, configmap_name, key="paused"):
            return None

    # model_construct: text that reached the agent without the policy's validation (built in code, a future field)
    settings = KillSwitchSettings.model_construct(name="k" * TEN_MB)
    switch = KillSwitch(Unreadable(), settings=settings, namespace="gpu-watchdog", clock=lambda: 100.0)
    with caplog.at_level(logging.WARNING, logger="watchdog.action.killswitch"):
        assert await switch.confirm() is not None
    assert caplog.records and all(len(record.getMessage()) < 1_000 for record in caplog.records)
    reason = switch.blocking_reason()
    assert reason is not None and "…" in reason and len(reason) < 1_000


def test_a_decision_detail_is_served_cut():
    from watchdog.model import ActionRecord, EvictionResult, FindingKind, Mode
    from watchdog.publishing.api import decisions_document

    record = ActionRecord(result=EvictionResult.PAUSED, reason="quota", namespace="batch", pod="train",
                          finding_key="quota/batch", finding_kind=FindingKind.QUOTA, mode=Mode.DRY_RUN,
                          timestamp=1.0, detail="kill switch unknown: ConfigMap gpu-watchdog/" + "k" * TEN_MB)
    item, = decisions_document([(7, record)], node="n", limit=10)["items"]
    assert len(item["detail"]) == 512 and item["detail"].endswith("…")
    assert item["detail"].startswith("kill switch unknown: ConfigMap gpu-watchdog/kkk")
