"""`gpu-watchdog bundle`: the archive a user attaches to a bug report, built from a running simulated agent (its
flight recorder on disk, its /metrics over real HTTP) or, with no recorder, from a fresh recording.

The command runs as a user runs it, in its own process with its own TMPDIR, so the tests can see that it leaves
nothing behind; every byte of every member is searched for the secrets the settings point at.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import subprocess
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path

import pytest

from tests.service.conftest import REPO, SCENARIOS
from watchdog.answers import bundle_sources
from watchdog.cli import main
from watchdog.trace import read_trace
from watchdog.trace.flight import segments


def run_bundle(tmpdir: Path, *args: str) -> subprocess.CompletedProcess:
    tmpdir.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "watchdog.cli", "bundle", *args], cwd=REPO, capture_output=True,
                          text=True, env=dict(os.environ, TMPDIR=str(tmpdir)), timeout=300)


def members(archive: Path) -> dict[str, bytes]:
    """Each file of the archive by its path below the bundle's one top directory."""
    with tarfile.open(archive) as tar:
        [top] = {member.name.split("/")[0] for member in tar.getmembers()}
        return {member.name.removeprefix(f"{top}/"): tar.extractfile(member).read()
                for member in tar.getmembers() if member.isfile()}


def readable(name: str, data: bytes) -> bytes:
    """A member's bytes and, for a .gz member, what they decompress to (as far as they go: a segment still being
    written has no gzip trailer)."""
    return data + zlib.decompressobj(wbits=31).decompress(data) if name.endswith(".gz") else data


def manifest_sizes(text: str) -> dict[str, int]:
    rows = [line.split(None, 2) for line in text.splitlines()[2:] if line.strip()]
    return {name: int(size) for size, name, _source in rows}


async def test_a_bundle_of_a_running_agent_carries_every_part_and_no_secret(drive, tmp_path):
    token, password, inline, url_password = (secrets.token_hex(16) for _ in range(4))
    token_file = tmp_path / "secret" / "webhook-token"
    token_file.parent.mkdir()
    token_file.write_text(token)
    password_file = tmp_path / "secret" / "mqtt-password"
    password_file.write_text(password)
    flight = tmp_path / "flight"
    driver = await drive(SCENARIOS / "demo.yaml", flight_recorder={"enabled": True, "directory": str(flight)})
    await driver.ticks(5)
    driver.agent.flight_recorder.close()  # the segment complete on disk, to compare with its copy
    config = tmp_path / "settings.yaml"
    config.write_text(
        f"publishing: {{host: 127.0.0.1, port: {driver.agent.port}}}\n"
        f"flight_recorder: {{enabled: true, directory: {flight}}}\n"
        f"controller: {{token_file: {token_file}}}\n"
        f"mqtt: {{username: agent, password_file: {password_file}}}\n"
        f"kube: {{access: url, url: 'http://127.0.0.1:1', token: {inline}}}\n"
        f"signals: {{prometheus_url: 'http://reader:{url_password}@prometheus:9090'}}\n")
    log = tmp_path / "agent.log"
    log.write_text("2026-12-01 INFO watchdog.service.agent: gpu-watchdog agent on node sim-node-1\n")
    out = tmp_path / "out" / "bundle.tar.gz"
    out.parent.mkdir()

    done = await asyncio.to_thread(run_bundle, tmp_path / "tmp", "--config", str(config), "--simulate",
                                   str(SCENARIOS / "demo.yaml"), "--log", str(log), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}" in done.stdout

    files = members(out)
    [segment] = segments(flight)
    assert {"MANIFEST.txt", "probe.txt", "probe.json", "metrics.txt", "settings.json", "policy.json",
            "versions.txt", "logs/0-agent.log", f"flight/{segment.name}"} <= set(files)
    assert not any(name.startswith("recording/") for name in files)  # the recorder had segments
    assert files[f"flight/{segment.name}"].startswith(segment.read_bytes())
    assert b"gpu_watchdog_build_info{" in files["metrics.txt"]
    assert b'"gpus"' in files["probe.json"] and b"NVIDIA H100" in files["probe.txt"]
    versions = files["versions.txt"].decode()
    assert "nvidia-ml-py: " in versions and "kernel: " in versions and "running agent" in versions
    assert manifest_sizes(files["MANIFEST.txt"].decode()) == {
        name: len(data) for name, data in files.items() if name != "MANIFEST.txt"}

    for name, data in files.items():
        for secret in (token, password, inline, url_password):
            assert secret.encode() not in readable(name, data), f"{name} carries a secret"
    settings = files["settings.json"].decode()
    assert str(token_file) in settings and str(password_file) in settings
    assert "kube.token" in settings and "signals.prometheus_url" in settings  # named as redacted

    assert os.listdir(out.parent) == ["bundle.tar.gz"] and out.stat().st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path / "tmp") == []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scratch_under_slash_tmp() -> set[str]:
    """What bundle_sources.scratch_for_recording may make under /tmp for a simulated node's sockets."""
    return {name for name in os.listdir("/tmp") if name.startswith("gwb-")}


def test_without_a_recorder_the_bundle_records_and_notes_what_it_could_not_reach(tmp_path):
    before = scratch_under_slash_tmp()
    out = tmp_path / "bundle.tar.gz"
    nobody = f"http://127.0.0.1:{free_port()}"
    done = run_bundle(tmp_path / "tmp", "--simulate", str(SCENARIOS / "demo.yaml"), "--record-seconds", "3",
                      "--agent-url", nobody, "--out", str(out))
    assert done.returncode == 0, done.stderr

    files = members(out)
    assert {"recording/trace.jsonl.gz", "recording/record.log", "probe.json", "probe.txt", "settings.json",
            "policy.json", "versions.txt", "NOTES.txt", "MANIFEST.txt"} <= set(files)
    assert "metrics.txt" not in files
    trace = tmp_path / "trace.jsonl.gz"
    trace.write_bytes(files["recording/trace.jsonl.gz"])
    assert len(list(read_trace(trace))) >= 3
    notes = files["NOTES.txt"].decode()
    assert f"could not be scraped at {nobody}/metrics" in notes and "kubectl logs" in notes
    assert os.listdir(tmp_path / "tmp") == [] and scratch_under_slash_tmp() <= before


@pytest.mark.parametrize("where", ["missing-directory/bundle.tar.gz", "a-directory"])
def test_an_unwritable_out_is_one_line_before_any_work(tmp_path, capsys, monkeypatch, where):
    (tmp_path / "a-directory").mkdir()
    monkeypatch.setattr("watchdog.answers.bundle.collect", lambda *a: pytest.fail("gathered for nothing"))
    out = tmp_path / where
    assert main(["bundle", "--out", str(out)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"gpu-watchdog bundle: {out}: ")
    assert ("cannot write the bundle there" in line) if "missing" in where else ("is a directory" in line)
    assert sorted(os.listdir(tmp_path)) == ["a-directory"] and os.listdir(tmp_path / "a-directory") == []


def test_ctrl_c_leaves_neither_archive_nor_temporary_files(tmp_path, capsys, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(bundle_sources, "scrape", interrupted)
    out = tmp_path / "bundle.tar.gz"
    assert main(["bundle", "--simulate", str(SCENARIOS / "demo.yaml"), "--record-seconds", "0",
                 "--out", str(out)]) == 130
    assert "interrupted; nothing written" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["tmp"] and os.listdir(scratch) == []
