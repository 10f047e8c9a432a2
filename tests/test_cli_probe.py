"""`gpu-watchdog probe` on a simulated node: the table by default, every answer with --json, prerequisites first.

The settings file points the host checks at fixture paths (a real unix socket, a /proc tree), as the agent's
settings point them at the host's.
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest

from watchdog.cli import main

REPO = Path(__file__).resolve().parents[1]
DEMO = str(REPO / "scenarios" / "demo.yaml")
CHECKS = ["kubelet_socket", "host_pids", "cgroups", "driver", "persistence_mode", "mig_mode", "gpm"]
POD_CGROUP = "0::/kubepods/burstable/pod7d3c2f1e-1111-4a2b-9c3d-0123456789ab/" + "b" * 64 + "\n"


def prerequisite_lines(out: str) -> list[str]:
    """The prerequisites' lines with their wrapped continuations joined back."""
    lines: list[str] = []
    for line in out.split("\n\n", 1)[0].splitlines()[1:]:
        if line.startswith("   ") and lines:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return lines


@pytest.fixture
def node_paths(tmp_path: Path):
    """A settings file naming a listening kubelet socket and a host-like /proc; yields (settings, socket path)."""
    proc = tmp_path / "proc"
    processes = ((1, "systemd", "0::/init.scope\n"), (2, "kthreadd", "0::/\n"), (77, "python", POD_CGROUP))
    for pid, comm, cgroup in processes:
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "comm").write_text(comm + "\n")
        (proc / str(pid) / "cgroup").write_text(cgroup)
    path = tmp_path / "pod-resources" / "kubelet.sock"
    path.parent.mkdir()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    settings = tmp_path / "settings.yaml"
    settings.write_text(f"attribution: {{kubelet_socket: {path}, proc_root: {proc}}}\n")
    yield settings, path
    server.close()


def test_the_default_is_a_table_with_the_prerequisites_first(node_paths, capsys) -> None:
    settings, _ = node_paths

    assert main(["probe", "--simulate", DEMO, "--config", str(settings)]) == 0

    out = capsys.readouterr().out
    assert out.startswith("Node prerequisites\n")
    lines = prerequisite_lines(out)
    assert re.match(r"^  ok +kubelet pod-resources socket +\S+kubelet\.sock is a socket$", lines[0])
    assert re.match(r"^  ok +host PIDs \(hostPID\) +\S+ shows the host's PIDs \(3 processes", lines[1])
    assert re.match(r"^  ok +cgroups \(pod of each PID\) +v2 \(unified\), cgroupfs driver; 1 of 3", lines[2])
    assert re.match(r"^  ok +driver and NVML versions +driver 580\.82\.07, NVML 13\.580\.82\.07", lines[3])
    assert [line.split()[0] for line in lines[4:]] == ["ok", "ok", "warn"]  # persistence, MIG, GPM (the A100)
    assert "GPU 2  NVIDIA A100-SXM4-40GB" in out and "nvmlEventSetWait_v2" in out
    calls = out.split("\n\n", 1)[1].splitlines()  # the prerequisites may carry a long fixture path whole
    assert not out.lstrip().startswith("{") and max(map(len, calls)) <= 100


def test_json_keeps_every_answer_and_adds_the_prerequisites(node_paths, capsys) -> None:
    settings, _ = node_paths

    assert main(["probe", "--json", "--simulate", DEMO, "--config", str(settings)]) == 0

    report = json.loads(capsys.readouterr().out)
    assert [line["check"] for line in report["prerequisites"]] == CHECKS
    assert {line["status"] for line in report["prerequisites"][:4]} == {"ok"}
    assert report["prerequisites"][4]["gpus"] == {"0": "on", "1": "on", "2": "on"}
    assert len(report["gpus"]) == 3 and sum(len(gpu["mig_devices"]) for gpu in report["gpus"]) == 7
    assert report["events"]["nvmlEventSetWait_v2"]["outcome"] == "no_event"
    assert report["gpus"][0]["mig_devices"][0]["gpm"]["metrics"]["supported"]  # the simulated clock advanced


def test_a_missing_socket_reads_missing_with_what_to_do(node_paths, tmp_path: Path, capsys) -> None:
    settings, path = node_paths
    path.unlink()

    assert main(["probe", "--simulate", DEMO, "--config", str(settings)]) == 0  # prerequisites never fail it

    line = prerequisite_lines(capsys.readouterr().out)[0]
    assert re.match(r"^  missing +kubelet pod-resources socket +\S+kubelet\.sock: absent\. Fix: mount", line)
