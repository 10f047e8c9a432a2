"""Settings and policy files: precedence, and refusals that name the field and the reason."""

from __future__ import annotations

import pytest

from watchdog.config import ConfigError, check_file, load_policy, load_settings


def test_yaml_then_environment_then_flags(tmp_path):
    path = tmp_path / "settings.yaml"
    path.write_text("node_name: from-file\npublishing: {port: 9000}\nsampling: {interval_seconds: 2}\n")
    settings = load_settings(
        path,
        environ={"GPU_WATCHDOG_PUBLISHING__PORT": "9100", "GPU_WATCHDOG_SAMPLING__INTERVAL_SECONDS": "3"},
        flags={"sampling": {"interval_seconds": 5}},
    )
    assert settings.node_name == "from-file"
    assert settings.publishing.port == 9100
    assert settings.sampling.interval_seconds == 5
    assert settings.attribution.kubelet_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"


def test_service_link_variables_are_not_settings():
    environ = {"GPU_WATCHDOG_METRICS_PORT": "tcp://10.0.0.1:9435", "GPU_WATCHDOG_SERVICE_HOST": "10.0.0.1",
               "GPU_WATCHDOG_CONTROLLER_PORT_8443_TCP": "tcp://10.0.0.2:8443", "GPU_WATCHDOG_NODE_NAME": "n1",
               "GPU_WATCHDOG_PUBLISHING__PORT": "9100"}
    settings = load_settings(environ=environ)
    assert settings.node_name == "n1" and settings.publishing.port == 9100


def test_invalid_settings_name_every_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("publishing: {port: 70000}\nsampling: {interval_seconds: -1}\nno_such_topic: 1\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, environ={})
    fields = {field for field, _ in caught.value.problems}
    assert fields == {"publishing.port", "sampling.interval_seconds", "no_such_topic"}
    assert "publishing.port" in str(caught.value)


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("publishing:\n  port: [1, 2\n")
    kind, problems = check_file(path)
    assert problems and problems[0][0].startswith("line ")


def test_policy_file_is_told_apart_from_settings(tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("action: {mode: enforce, priority_floor: 5000}\n")
    assert check_file(policy) == ("policy", [])
    assert load_policy(policy).action.priority_floor == 5000
    policy.write_text("action: {mode: sometimes}\n")
    kind, problems = check_file(policy)
    assert kind == "policy" and [field for field, _ in problems] == ["action.mode"]
    policy.write_text("action: {mode: enforce}\nactoin: {}\n")  # a typo is named, as a policy's
    assert check_file(policy) == ("policy", [("actoin", "Extra inputs are not permitted")])
