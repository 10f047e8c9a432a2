"""`gpu-watchdog demo` on the best-effort vGPU scenario in enforce mode, as a user would watch it: the banner's
`kubectl get vmi -A` lists the VMs, and the culprit VM's launcher eviction comes back from KubeVirt (the fake API
server's emulation of its webhook and evacuation controller) as a live migration: a VirtualMachineInstanceMigration
for that VMI and nothing else, the result `migrating` counted in the metric, written to the audit log and told to
the cluster as an Event. The high-priority VMs are never touched."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import time
import urllib.request

from tests.test_cli_demo_tour import REPO, Running, environment, expand

SCENARIO = REPO / "scenarios" / "tp-vgpu-best-effort-contention.yaml"
CULPRIT = ("batch", "vm-sweep")
MIGRATING = re.compile(r'^gpu_watchdog_evictions_total\{(?=[^}]*result="migrating")(?=[^}]*namespace="batch")[^}]*\} '
                       r'(\d+(?:\.\d+)?)$', re.M)


def _shell_env(commands: list[str], env: dict[str, str]) -> dict[str, str]:
    shell_env = dict(env)
    for command in commands:
        words = shlex.split(command, comments=True)
        if words and words[0] == "export":
            for assignment in words[1:]:
                name, _, value = assignment.partition("=")
                shell_env[name] = expand(value, shell_env)
    return shell_env


def _kubectl(args: list[str], env: dict[str, str], cwd) -> str:
    result = subprocess.run(["kubectl", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_enforce_on_a_vgpu_host_live_migrates_the_culprit_vm(tmp_path):
    env, _ = environment(tmp_path)
    audit = tmp_path / "audit.jsonl"
    config = tmp_path / "settings.yaml"
    config.write_text(f"audit_log: {audit}\n", encoding="utf-8")
    demo = Running(["demo", "--no-tui", "--port", "0", "--speed", "20", "--mode", "enforce", "--scenario",
                    str(SCENARIO), "--config", str(config)], env=env, cwd=tmp_path)
    try:
        title, commands = demo.banner()
        port = int(re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", title).group(1))
        shell_env = _shell_env(commands, env)
        assert any(c.startswith("kubectl get vmi -A") for c in commands), commands
        vmis = _kubectl(["get", "vmi", "-A"], shell_env, tmp_path)
        assert all(name in vmis for name in ("vm-serve", "vm-train", "vm-sweep")), vmis
        deadline, migrations, metrics = time.monotonic() + 150, [], ""  # ~tick 170 of the scenario, at 20× real time
        while time.monotonic() < deadline:
            migrations = json.loads(_kubectl(["get", "vmim", "-A", "-o", "json"], shell_env, tmp_path))["items"]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                metrics = response.read().decode()
            if migrations and MIGRATING.search(metrics):
                break
            time.sleep(0.5)
        assert [(m["metadata"]["namespace"], m["spec"]["vmiName"]) for m in migrations] == [CULPRIT], migrations
        assert float(MIGRATING.search(metrics).group(1)) >= 1, metrics
        events = json.loads(_kubectl(["get", "events", "-A", "-o", "json"], shell_env, tmp_path))["items"]
        assert any(e["reason"] == "GpuWatchdogMigrationRequested" and e["involvedObject"]["namespace"] == "batch"
                   and e["involvedObject"]["name"].startswith("virt-launcher-vm-sweep-") for e in events), events
        lines = [json.loads(line) for line in audit.read_text(encoding="utf-8").splitlines() if line.strip()]
        migrated = [line for line in lines if line.get("result") == "migrating"]
        assert migrated and all((line["pod"]["namespace"], line["pod"]["name"].rsplit("-", 1)[0])
                                == ("batch", "virt-launcher-vm-sweep") for line in migrated), lines
        assert not [line for line in lines if line.get("result") in ("evicted", "error", "blocked_pdb")], lines
    finally:
        status = demo.stop(signal.SIGINT)
    assert status == 0
