"""Every failure a user causes is one line on stderr naming what to do, exit status 2, never a traceback."""

from __future__ import annotations

import socket

import pytest

from watchdog.cli import main
from watchdog.cli_errors import CommandError, describe


def one_line_error(capsys, argv: list[str], *, command: str) -> str:
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if " WARNING " not in line and " INFO " not in line]
    assert len(err) == 1, err
    assert err[0].startswith(f"gpu-watchdog {command}: ") and "Traceback" not in err[0]
    return err[0]


@pytest.fixture
def busy_port():
    """A port something else already listens on."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


@pytest.mark.parametrize("argv", [
    ["demo", "--no-tui", "--config", "{missing}"],
    ["run", "--config", "{missing}"],
    ["controller", "--config", "{missing}"],
    ["record", "--out", "{tmp}/trace.jsonl", "--config", "{missing}"],
])
def test_a_missing_config_file_is_named(capsys, tmp_path, argv):
    argv = [arg.format(missing=tmp_path / "nope.yaml", tmp=tmp_path) for arg in argv]
    line = one_line_error(capsys, argv, command=argv[0])
    assert f"{tmp_path / 'nope.yaml'}: No such file or directory: check the path" in line


@pytest.mark.parametrize("argv", [["demo", "--no-tui", "--scenario", "{missing}"], ["run", "--simulate", "{missing}"],
                                  ["eval", "{missing}"]])
def test_a_missing_scenario_or_directory_is_named(capsys, tmp_path, argv):
    argv = [arg.format(missing=tmp_path / "absent") for arg in argv]
    line = one_line_error(capsys, argv, command=argv[0])
    assert f"{tmp_path / 'absent'}: no such scenario file" in line and "scenarios/demo.yaml" in line


def test_demo_with_an_invalid_settings_file_names_the_field(capsys, tmp_path):
    bad = tmp_path / "settings.yaml"
    bad.write_text("policy:\n  action: {mode: bogus}\n")
    line = one_line_error(capsys, ["demo", "--no-tui", "--config", str(bad)], command="demo")
    assert "policy.action.mode" in line and f"check-config {bad}" in line
    bad.write_text("policy: [\n")
    line = one_line_error(capsys, ["demo", "--no-tui", "--config", str(bad)], command="demo")
    assert f"{bad}:2: YAML" in line


@pytest.mark.parametrize("command", ["demo", "run"])
def test_a_port_in_use_says_which_and_how_to_change_it(capsys, busy_port, command):
    argv = ["demo", "--no-tui"] if command == "demo" else ["run", "--simulate", "scenarios/demo.yaml"]
    line = one_line_error(capsys, argv + ["--port", str(busy_port)], command=command)
    assert f"127.0.0.1:{busy_port} is already in use" in line and "--port N" in line


def test_the_controller_without_a_cluster(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config either: in-cluster, and not in a cluster
    line = one_line_error(capsys, ["controller"], command="controller")
    assert "cannot reach the Kubernetes API" in line and "kube.kubeconfig" in line


@pytest.mark.parametrize("argv", [["controller"], ["explain", "team-a/pod-0"], ["controller", "--kubeconfig", "X"],
                                  ["explain", "team-a/pod-0", "--kubeconfig", "X"]])
def test_a_kubeconfig_that_does_not_exist_is_named(capsys, monkeypatch, tmp_path, argv):
    """As $KUBECONFIG or as --kubeconfig, a missing file is "no such file", not the client's "Expected key
    current-context" (the controller honours $KUBECONFIG as explain and audit do)."""
    missing = str(tmp_path / "clusters" / "kubeconfig")
    monkeypatch.setenv("KUBECONFIG", missing)
    line = one_line_error(capsys, [missing if arg == "X" else arg for arg in argv], command=argv[0])
    assert f"cannot load kubeconfig {missing}: no such file" in line and "--kubeconfig" in line
    assert "current-context" not in line


def test_the_controller_port_hint_names_its_setting():
    busy = OSError(98, "error while attempting to bind on address ('0.0.0.0', 9443): address already in use")
    assert describe(busy, command="controller") == (
        "0.0.0.0:9443 is already in use: stop whatever listens there or set controller.listen_port in the --config "
        "settings")
    assert describe(CommandError("line one\nline two"), command="run") == "line one; line two"


def test_a_bug_keeps_its_traceback():
    assert describe(KeyError("x"), command="run") is None


def test_every_argument_has_help_text():
    import argparse

    from watchdog.cli import build_parser

    missing = []
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                missing += [f"{name} {' '.join(arg.option_strings) or arg.dest}" for arg in sub._actions
                            if not arg.help and not isinstance(arg, argparse._HelpAction)]
    assert missing == []


@pytest.mark.parametrize("argv", [["explain", "team-a/trainer-0"], ["audit"]])
def test_commands_without_config_say_how_to_point_them_at_a_cluster(capsys, monkeypatch, tmp_path, argv):
    """explain, inventory and audit take kubectl's --kubeconfig: their advice names it, never a --config they lack."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config: in-cluster, which is not there
    if argv[0] == "audit":  # audit words its own failure to read the cluster (exit 2, one line)
        assert main(argv) == 2
        assert "--config" not in capsys.readouterr().err
        return
    line = one_line_error(capsys, argv, command=argv[0])
    assert "cannot reach the Kubernetes API" in line and "--kubeconfig FILE or $KUBECONFIG" in line
    assert "--config" not in line
    from watchdog.kube.errors import KubeError

    assert "--kubeconfig" in describe(KubeError("connection refused"), command="inventory")
    assert "kube.kubeconfig" in describe(KubeError("connection refused"), command="run")
