"""`check-config` says which legal policy values are dangerous (exit 0) and refuses the one
that can only be a mistake, a priority floor above system-cluster-critical (exit 1), naming the field."""

from __future__ import annotations

from watchdog.cli import main


def test_dangerous_values_are_warnings_with_their_field_and_exit_0(tmp_path, capsys):
    policy = tmp_path / "policy.yaml"
    policy.write_text("action: {mode: enforce, protected_namespaces: [], priority_floor: 2000000000,\n"
                      "         node_eviction_burst: 11, pod_cooldown_seconds: 0, tenant_cooldown_seconds: 0}\n")
    assert main(["check-config", str(policy)]) == 0
    out = capsys.readouterr().out
    assert f"{policy}: valid policy file" in out
    for field in ("protected_namespaces", "priority_floor", "node_eviction_burst", "pod_cooldown_seconds",
                  "tenant_cooldown_seconds"):
        assert f"  warning: action.{field}: " in out, field


def test_an_inline_policy_in_settings_is_reviewed_too(tmp_path, capsys):
    settings = tmp_path / "settings.yaml"
    settings.write_text("policy: {action: {mode: enforce, protected_namespaces: [kube-system]}}\n")
    assert main(["check-config", str(settings)]) == 0
    assert "  warning: policy.action.protected_namespaces: mode enforce" in capsys.readouterr().out


def test_the_issue_policy_is_refused_naming_the_field(tmp_path, capsys):
    policy = tmp_path / "policy.yaml"
    policy.write_text("action: {mode: enforce, protected_namespaces: [], priority_floor: 3000000000}\n")
    assert main(["check-config", str(policy)]) == 1
    out = capsys.readouterr().out
    assert "action.priority_floor:" in out and "system-cluster-critical" in out


def test_a_safe_policy_says_nothing_more(tmp_path, capsys):
    policy = tmp_path / "policy.yaml"
    policy.write_text("action: {mode: enforce, protected_namespaces: [kube-system, serving]}\n")
    assert main(["check-config", str(policy)]) == 0
    assert capsys.readouterr().out == f"{policy}: valid policy file\n"
