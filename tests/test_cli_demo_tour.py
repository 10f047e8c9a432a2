"""The demo's banner is its tour: every command it prints is run, as printed and with the environment it exports,
against the running demo, and shows the demo's data. Then the demo, `run --simulate` and `record` leave no
temporary directory behind, whether they end on their own, on Ctrl-C or on SIGTERM."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "watchdog.cli"]
START_TIMEOUT = 60  # seconds: bounds only a broken build; a demo prints its banner in a second or two


class Running:
    """A CLI subprocess whose stdout is read by a thread (so it never blocks on a full pipe)."""

    def __init__(self, args: list[str], *, env: dict[str, str], cwd: Path) -> None:
        self.log = open(cwd / "stderr.log", "w")  # its logs, for a failing test's reader
        self.process = subprocess.Popen([*CLI, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=self.log,
                                        text=True)
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(iter(self.process.stdout.readline, "")),
                         daemon=True).start()

    def banner(self) -> tuple[str, list[str]]:
        """The title line and the command lines of the banner, once printed."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            lines = list(self.lines)
            for index, line in enumerate(lines):
                if line.rstrip() == "Try, in another shell:":
                    commands = []
                    for command in lines[index + 1:]:
                        if not command.startswith("  "):
                            break
                        commands.append(command.strip())
                    return lines[index - 1].strip(), commands
            assert self.process.poll() is None, f"exited {self.process.returncode} without a banner: {lines}"
            time.sleep(0.1)
        raise AssertionError(f"no banner within {START_TIMEOUT} s: {self.lines}")

    def stop(self, signum: int) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signum)
        try:
            return self.process.wait(timeout=60)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self.log.close()


def environment(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The test's environment with a temporary directory of its own (to see what is left in it) and a HOME."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = dict(os.environ, PYTHONUNBUFFERED="1", TMPDIR=str(temporary), HOME=str(tmp_path),
               KUBECACHEDIR=str(tmp_path / "kube-cache"))
    return env, temporary


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def wait_until_flagged(port: int, pod: str) -> None:
    """Until the agent has a finding naming ``pod`` and has decided about it (a dry-run eviction)."""
    namespace, name = pod.split("/")
    query = f"?namespace={namespace}&pod={name}"
    deadline = time.monotonic() + 120  # the scenario flags it about a minute in, at ten times real time
    while time.monotonic() < deadline:
        try:
            findings = get_json(f"http://127.0.0.1:{port}/api/v1/findings{query}")["items"]
            decisions = get_json(f"http://127.0.0.1:{port}/api/v1/decisions{query}")["items"]
            if findings and any(d["result"] == "dry_run" for d in decisions):
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"the demo never flagged {pod}")


def expand(value: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda match: env.get(match.group(1), ""), value)


def check_output(words: list[str], result: subprocess.CompletedProcess) -> str:
    """What each command of the tour must show of the demo; returns which command it was."""
    out = result.stdout
    program, sub = Path(words[0]).name, words[1]
    if program == "kubectl" and sub == "get" and words[2] == "pods":
        assert result.returncode == 0, result.stderr
        assert "batch" in out and "scavenger-0" in out and "inference-0" in out
        assert re.search(r"^gpu-watchdog\s+gpu-watchdog-\w{5}\s+1/1\s+Running.*127\.0\.0\.1", out, re.M), out
        return "kubectl get pods"
    if program == "kubectl" and words[2] == "events":
        assert result.returncode == 0, result.stderr
        assert "GpuWatchdogDryRun" in out and "pod/scavenger-0" in out
        return "kubectl get events"
    assert program == "gpu-watchdog" or words[:3] == [sys.executable, "-m", "watchdog.cli"], words
    sub = words[1] if program == "gpu-watchdog" else words[3]
    if sub == "explain":
        assert result.returncode == 0, result.stderr
        assert "culprit of a critical unauthorized finding" in out
        assert "dry_run for the quota finding (dry-run mode, HTTP 201)" in out
        assert "not assigned to it (the kubelet gave it ml-prod/ranker-1)" in out and "GpuWatchdogDryRun" in out
        return "explain"
    if sub == "inventory":
        assert result.returncode == 0, result.stderr
        assert out.startswith("Node sim-node-1: asked its agent, pod gpu-watchdog/gpu-watchdog-")
        profiles = re.findall(r"\s(\dg\.\d+gb|whole GPU)\s", out)  # the demo's layout: two MIG H100s, one A100
        assert sorted(profiles) == sorted(["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb", "4g.40gb", "2g.20gb",
                                           "1g.10gb", "whole GPU"])
        assert re.search(r"2g\.20gb .* ml-prod/inference-0$", out, re.M)
        assert "ml-prod/ranker-1 (also used by batch/scavenger-0)" in out  # the live node: scavenger starts at 30 s
        return "inventory"
    if sub == "audit":
        assert result.returncode == 1, result.stderr  # documented: 1 when a check fails, as batch's do
        results = re.findall(r"^\S+\s+\S+\s+(PASS|WARN|FAIL|INFO|ERROR)\s", out, re.M)
        assert {"PASS", "WARN", "FAIL"} <= set(results) and "ERROR" not in results, out
        assert "# Suggested fixes (kubectl apply -f -):" in out and "kind: NetworkPolicy" in out
        return "audit"
    if sub == "record":
        assert result.returncode == 0, result.stderr
        assert "Try," not in out and "kubectl" not in out  # no banner for a cluster that is gone when it ends
        assert re.fullmatch(r"gpu-watchdog record: wrote 120 ticks to \S+demo\.jsonl\.gz", out.strip()), out
        return "record"
    if sub == "replay":
        assert result.returncode == 0, result.stderr
        assert "quota" in out and "unauthorized" in out
        return "replay"
    raise AssertionError(f"a banner line no test knows: {words}")


def test_every_line_of_the_demo_banner_works_against_the_running_demo(tmp_path):
    env, temporary = environment(tmp_path)
    demo = Running(["demo", "--no-tui", "--port", "0", "--speed", "10"], env=env, cwd=tmp_path)
    try:
        title, commands = demo.banner()
        port = int(re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", title).group(1))
        explained = next(shlex.split(c, comments=True)[-1] for c in commands if " explain " in c)
        wait_until_flagged(port, explained)
        shell_env, seen = dict(env), []
        for command in commands:
            words = shlex.split(command, comments=True)
            if words[0] == "export":
                for assignment in words[1:]:
                    name, _, value = assignment.partition("=")
                    shell_env[name] = expand(value, shell_env)
                continue
            result = subprocess.run(words, env=shell_env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
            seen.append(check_output(words, result))
        assert seen == ["kubectl get pods", "kubectl get events", "explain", "inventory", "audit", "record", "replay"]
        assert "KUBECONFIG" in shell_env
    finally:
        status = demo.stop(signal.SIGINT)  # Ctrl-C
    assert status == 0
    assert not list(temporary.iterdir())  # the world's directory went with it


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_run_simulate_removes_its_directory_when_stopped(tmp_path, signum):
    env, temporary = environment(tmp_path)
    run = Running(["run", "--simulate", str(REPO / "scenarios" / "demo.yaml"), "--port", "0"], env=env, cwd=tmp_path)
    try:
        title, commands = run.banner()
        assert title.startswith("gpu-watchdog run --simulate: simulated node sim-node-1")
        assert [path.name.startswith("gpu-watchdog-sim-") for path in temporary.iterdir()] == [True]
    finally:
        status = run.stop(signum)
    assert status == 0 and not list(temporary.iterdir())


def test_record_prints_no_banner_and_says_what_it_wrote(tmp_path):
    env, temporary = environment(tmp_path)
    out = tmp_path / "trace.jsonl"
    result = subprocess.run([*CLI, "record", "--simulate", str(REPO / "scenarios" / "demo.yaml"), "--ticks", "5",
                             "--fast", "--out", str(out)], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"gpu-watchdog record: wrote 5 ticks to {out}\n"
    assert len(out.read_text().splitlines()) == 6  # the header and five ticks
    assert not list(temporary.iterdir())


def test_the_readme_shows_the_banner_the_demo_prints():
    from types import SimpleNamespace

    from watchdog.demo.tour import tour
    from watchdog.testbed.scenario import load_scenario

    block = re.search(r"```\n(gpu-watchdog demo: .*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    workdir = Path("/tmp/gpu-watchdog-sim-abcd1234")  # the README's example paths
    world = SimpleNamespace(scenario=load_scenario(REPO / "scenarios" / "demo.yaml"), workdir=workdir)
    banner = tour(world, 9435, workdir / "kubeconfig", scenario="scenarios/demo.yaml")

    def lines(text: str) -> list[str]:  # PATH is exported only where the venv is not on it: left out
        return [line for line in text.splitlines() if "export PATH=" not in line]

    assert lines(banner) == lines(block)
