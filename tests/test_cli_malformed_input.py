"""`check-config` and `replay` on malformed input: exit 2 and one "FILE:LINE: reason" line, never a traceback."""

from __future__ import annotations

import json

import pytest

from watchdog.cli import main

HEADER = {"format": "gpu-watchdog-trace", "version": 1, "node": "node-a", "tick_seconds": 1.0,
          "started": 1_700_000_000.0, "agent_version": "0.1.0"}
TICK = {"tick": 1, "timestamp": 1.0, "sample": {"gpus": []}, "attribution": {"healthy": True}}

MALFORMED_YAML = {
    "nested-100k": (b"action:\n  mode: " + b"[" * 100_000, 2, "nested deeper than 64 levels"),
    "5000-digits": (b"action:\n  priority_floor: " + b"9" * 5000 + b"\n", 2, "too large"),
    "invalid-utf-8": (b"action:\n  mode: \xff\n", 2, "not UTF-8 text"),
    "duplicate-key": (b"action:\n  mode: observe\n  mode: enforce\n", 3, "duplicate key 'mode'"),
}


@pytest.mark.parametrize("case", MALFORMED_YAML)
def test_check_config_exits_2_with_file_and_line(tmp_path, capsys, case):
    text, line, reason = MALFORMED_YAML[case]
    path = tmp_path / "policy.yaml"
    path.write_bytes(text)
    good = tmp_path / "good.yaml"
    good.write_text("publishing: {port: 9435}\n")
    assert main(["check-config", str(good), str(path)]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{good}: valid settings file"
    assert out[1].startswith(f"{path}:{line}: ") and reason in out[1] and len(out) == 2


def test_check_config_invalid_fields_still_exit_1(tmp_path, capsys):
    path = tmp_path / "policy.yaml"
    path.write_text("action: {node_evictions_per_minute: 1e400, priority_floor: true}\n")
    assert main(["check-config", str(path)]) == 1
    out = capsys.readouterr().out
    assert "action.node_evictions_per_minute: Input should be a finite number" in out
    assert "action.priority_floor:" in out and "not a boolean" in out


@pytest.mark.parametrize("case", MALFORMED_YAML)
def test_replay_refuses_a_malformed_policy_with_exit_2(tmp_path, capsys, case):
    text, line, reason = MALFORMED_YAML[case]
    policy = tmp_path / "policy.yaml"
    policy.write_bytes(text)
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps(HEADER) + "\n" + json.dumps(TICK) + "\n")
    assert main(["replay", str(trace), "--policy", str(policy)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpu-watchdog replay: {policy}:{line}: ") and reason in err


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (b"[" * 100_000, "(line): nested deeper than 64 levels"),
        (b'{"tick": ' + b"9" * 5000 + b"}", "tick: an integer of 5000 digits is too large"),
        (b'{"tick": 2, "timestamp": 1e400, "sample": {"gpus": []}, "attribution": {"healthy": true}}',
         "timestamp: 1e400 is not a finite number"),
        (b'{"tick": 2, "node": "\xff"}', "(line): not UTF-8 text"),
    ],
    ids=["nested-100k", "5000-digits", "1e400", "invalid-utf-8"],
)
def test_replay_refuses_a_malformed_trace_with_exit_2(tmp_path, capsys, bad, reason):
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(json.dumps(HEADER).encode() + b"\n" + json.dumps(TICK).encode() + b"\n" + bad + b"\n")
    assert main(["replay", str(trace)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpu-watchdog replay: {trace}:3: {reason}")
