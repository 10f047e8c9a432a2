"""The demo on a vGPU host scenario serves each KubeVirt VM's vGPU series with the VM's namespace, virt-launcher pod
and VMI, and the host's scheduler series, as a user running `gpu-watchdog demo --scenario …` scrapes them."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
import urllib.request

import yaml

from tests.test_cli import CLI, REPO, free_port

SCENARIO = REPO / "scenarios" / "tp-vgpu-best-effort-contention.yaml"
VGPU_SERIES = re.compile(r'^gpu_watchdog_vgpu_sm_utilization_ratio\{(?P<labels>[^}]*)\}', re.M)
LABEL = re.compile(r'(\w+)="([^"]*)"')


def _vgpu_owners(body: str) -> set[tuple[str, str, str]]:
    owners = set()
    for match in VGPU_SERIES.finditer(body):
        labels = dict(LABEL.findall(match.group("labels")))
        owners.add((labels.get("namespace", ""), labels.get("vmi", ""), labels.get("pod", "")))
    return owners


def test_demo_on_a_vgpu_host_labels_each_vgpu_with_its_vm(tmp_path):
    vms = yaml.safe_load(SCENARIO.read_text())["gpus"][0]["vgpu"]["vms"]
    expected = {(vm["namespace"], vm["name"]) for vm in vms}
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    process = subprocess.Popen([*CLI, "demo", "--no-tui", "--port", str(port), "--scenario", str(SCENARIO)],
                               cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []  # drained by a thread, so the demo never blocks on a full pipe
    threading.Thread(target=lambda: output.extend(iter(process.stdout.readline, "")), daemon=True).start()
    try:
        body, owners, deadline = "", set(), time.monotonic() + 60  # bounded wait: server start, VMI list, pod watch
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                    body = response.read().decode()
                owners = _vgpu_owners(body)
                if {(namespace, vmi) for namespace, vmi, pod in owners if pod} == expected:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        assert {(namespace, vmi) for namespace, vmi, _ in owners} == expected, "".join(output[-40:])
        for namespace, vmi, pod in owners:
            assert pod.startswith(f"virt-launcher-{vmi}-"), (namespace, vmi, pod)
        assert re.search(r'^gpu_watchdog_gpu_vgpu_scheduler_info\{.*policy="best_effort".*\} 1\.0$', body, re.M)
        assert re.search(r'^gpu_watchdog_vgpu_framebuffer_total_bytes\{.*vgpu_type="GRID A100-10C".*\}', body, re.M)
    finally:
        process.terminate()
        process.wait(timeout=30)
