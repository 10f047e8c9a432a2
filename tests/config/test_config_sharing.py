"""``attribution.sharing``: the GPU sharing a node without GPU Feature Discovery states, refused field by field."""

from __future__ import annotations

import pytest

from watchdog.config import ConfigError, check_file, load_settings


def test_defaults_leave_it_to_the_kubelet_and_the_labels():
    sharing = load_settings(environ={}).attribution.sharing
    assert (sharing.strategy, sharing.replicas, sharing.refresh_seconds) == (None, None, 300.0)


def test_a_file_and_the_environment_set_it(tmp_path):
    path = tmp_path / "settings.yaml"
    path.write_text("attribution:\n  sharing:\n    strategy: mps\n    replicas: 4\n")
    sharing = load_settings(path, environ={}).attribution.sharing
    assert (sharing.strategy, sharing.replicas) == ("mps", 4)
    sharing = load_settings(environ={"GPU_WATCHDOG_ATTRIBUTION__SHARING__STRATEGY": "time-slicing"}).attribution.sharing
    assert sharing.strategy == "time-slicing"


@pytest.mark.parametrize(("sharing", "field", "reason"), [
    ({"strategy": "MPS"}, "attribution.sharing.strategy", "'mps' or 'time-slicing'"),
    ({"strategy": "none"}, "attribution.sharing.strategy", "'mps' or 'time-slicing'"),
    ({"replicas": 0}, "attribution.sharing.replicas", "greater than or equal to 1"),
    ({"replicas": 5000}, "attribution.sharing.replicas", "less than or equal to 1024"),
    ({"replicas": True}, "attribution.sharing.replicas", "not a boolean"),
    ({"replicas": 2.5}, "attribution.sharing.replicas", "integer"),
    ({"refresh_seconds": 0}, "attribution.sharing.refresh_seconds", "greater than 0"),
    ({"stratgey": "mps"}, "attribution.sharing.stratgey", "Extra inputs are not permitted"),
])
def test_a_bad_value_names_the_field_and_the_reason(sharing, field, reason):
    with pytest.raises(ConfigError) as caught:
        load_settings(flags={"attribution": {"sharing": sharing}}, environ={})
    [(path, message)] = caught.value.problems
    assert path == field and reason in message


def test_check_config_reports_it(tmp_path):
    path = tmp_path / "settings.yaml"
    path.write_text("attribution:\n  sharing: {strategy: mig, replicas: -1}\n")
    kind, problems = check_file(path)
    assert kind == "settings"
    assert [field for field, _ in problems] == ["attribution.sharing.strategy", "attribution.sharing.replicas"]
