"""YAML that PyYAML and pydantic's lax mode would take silently, or crash on, is refused with the line or field."""

from __future__ import annotations

import pytest

from watchdog.config import ConfigError, MalformedFile, load_policy, load_settings


def policy_file(tmp_path, text: str | bytes):
    path = tmp_path / "policy.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_a_duplicate_key_is_an_error_not_the_last_one_winning(tmp_path):
    path = policy_file(tmp_path, "action:\n  mode: observe\n  priority_floor: 5\n  mode: enforce\n")
    with pytest.raises(MalformedFile) as caught:
        load_policy(path)
    assert caught.value.line == 4 and "duplicate key 'mode' (first given on line 2)" in caught.value.reason
    assert str(caught.value).startswith(f"{path}:4: ")
    flow = policy_file(tmp_path, "action: {mode: observe, mode: enforce}\n")
    with pytest.raises(MalformedFile, match="duplicate key 'mode'"):
        load_policy(flow)


def test_a_merge_key_may_be_overridden(tmp_path):
    text = "action:\n  <<: {mode: observe, priority_floor: 7}\n  mode: enforce\n"
    action = load_policy(policy_file(tmp_path, text)).action
    assert (action.mode, action.priority_floor) == ("enforce", 7)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("action: {priority_floor: true}\n", "action.priority_floor"),
        ("action: {node_evictions_per_minute: .inf}\n", "action.node_evictions_per_minute"),
        ("action: {node_evictions_per_minute: .nan}\n", "action.node_evictions_per_minute"),
        ("action: {tenant_cooldown_seconds: 1.0e+400}\n", "action.tenant_cooldown_seconds"),
        ("action: {tenant_cooldown_seconds: 1e400}\n", "action.tenant_cooldown_seconds"),  # YAML 1.1: a string
        ("action: {grace_seconds: false}\n", "action.grace_seconds"),
        ("detection: {xid: {application: [13, true]}}\n", "detection.xid.application"),
        ("detection: {quota: {tenants: {team-a: {instances: {1g.10gb: true}}}}}\n",
         "detection.quota.tenants.team-a.instances"),
    ],
)
def test_a_boolean_or_a_non_finite_number_is_refused_where_a_number_is_due(tmp_path, text, field):
    with pytest.raises(ConfigError) as caught:
        load_policy(policy_file(tmp_path, text))
    assert [path for path, _ in caught.value.problems] == [field]


def test_environment_text_is_still_read_as_numbers_and_booleans():
    environ = {"GPU_WATCHDOG_PUBLISHING__PORT": "9100", "GPU_WATCHDOG_MQTT__ENABLED": "true",
               "GPU_WATCHDOG_SAMPLING__INTERVAL_SECONDS": "2.5", "GPU_WATCHDOG_CONTROLLER__MAX_BODY_BYTES": "4096"}
    settings = load_settings(environ=environ)
    assert (settings.publishing.port, settings.mqtt.enabled, settings.sampling.interval_seconds) == (9100, True, 2.5)
    assert settings.controller.max_body_bytes == 4096
    with pytest.raises(ConfigError) as caught:
        load_settings(environ={"GPU_WATCHDOG_SAMPLING__INTERVAL_SECONDS": "inf"})
    assert [path for path, _ in caught.value.problems] == ["sampling.interval_seconds"]


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("action:\n  x: " + "[" * 100_000, 2, "nested deeper than 64 levels"),
        ("action:\n  priority_floor: " + "9" * 5000 + "\n", 2, "an integer written with 5000 characters"),
        ("action:\n  priority_floor: 0x" + "f" * 5000 + "\n", 2, "an integer written with 5002 characters"),
        ("action:\n  since: 2026-13-45\n", 2, "month must be in 1..12"),
        (b"action:\n  mode: enforce\n  tenant_label: \xff\xfe\n", 3, "not UTF-8 text"),
        ("- a list\n", 1, "the top level must be a mapping"),
    ],
    ids=["nested-100k", "5000-digits", "5002-hex", "bad-timestamp", "invalid-utf-8", "not-a-mapping"],
)
def test_malformed_yaml_is_a_clear_error_with_its_line(tmp_path, text, line, reason):
    path = policy_file(tmp_path, text)
    with pytest.raises(MalformedFile) as caught:
        load_policy(path)
    assert caught.value.line == line and reason in caught.value.reason
    assert str(caught.value).startswith(f"{path}:{line}: ")
