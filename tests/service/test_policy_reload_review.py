"""A reload warns about dangerous values (and applies them: the floor still holds), and
refuses the one that can only be a mistake, keeping the last good policy."""

from __future__ import annotations

import logging

from watchdog.service.policy_watch import PolicyWatcher


def reload_to(tmp_path, text):
    """A watcher started on an observe-only policy whose file then reads ``text`` (not yet checked)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("action: {mode: observe}\n")
    applied, results = [], []
    watcher = PolicyWatcher(str(policy), apply=applied.append, on_result=results.append)
    policy.write_text(text)
    return watcher, applied, results


def test_a_dangerous_reload_is_applied_with_one_warning_per_value(tmp_path, caplog):
    w, applied, results = reload_to(
        tmp_path, "action: {mode: enforce, protected_namespaces: [], pod_cooldown_seconds: 0}\n"
    )
    with caplog.at_level(logging.WARNING, logger="watchdog.service.policy_watch"):
        assert w.check() is True
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert any("action.protected_namespaces" in m for m in warnings)
    assert any("action.pod_cooldown_seconds" in m for m in warnings)
    assert [p.action.mode.value for p in applied] == ["enforce"] and results == ["success"]


def test_a_floor_above_system_cluster_critical_is_refused_and_the_last_good_policy_stays(tmp_path, caplog):
    w, applied, results = reload_to(
        tmp_path, "action: {mode: enforce, protected_namespaces: [], priority_floor: 3000000000}\n"
    )
    with caplog.at_level(logging.ERROR, logger="watchdog.service.policy_watch"):
        assert w.check() is False
    assert applied == [] and results == ["failure"]
    assert "priority_floor" in caplog.text


def test_a_safe_reload_warns_about_nothing(tmp_path, caplog):
    w, applied, results = reload_to(
        tmp_path, "action: {mode: enforce, protected_namespaces: [kube-system, serving]}\n"
    )
    with caplog.at_level(logging.WARNING, logger="watchdog.service.policy_watch"):
        assert w.check() is True
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING] and results == ["success"]
