"""The hand-written MPS trace of docs/trace-format.md replays as the document says (issue 21's acceptance): the right
memory per pod, nothing about the MPS server, and a memory-limit warning for the client that reaches its limit."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from watchdog.detection import devices_of
from watchdog.trace import read_trace

ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30


def _example(tmp_path: Path) -> Path:
    text = (ROOT / "docs" / "trace-format.md").read_text(encoding="utf-8")
    section = text.split("## A hand-written MPS GPU", 1)[1]
    block = re.search(r"```json\n(.*?)\n```", section, re.S).group(1)
    path = tmp_path / "mps.jsonl"
    path.write_text(block + "\n", encoding="utf-8")
    return path


def test_each_pod_gets_its_own_clients_memory_and_the_server_none(tmp_path):
    ticks = list(read_trace(_example(tmp_path)))
    last = ticks[-1]
    [device] = devices_of(last.sample, last.attribution)
    assert device.pod_memory == {"prod/serve": 8 * GIB, "batch/train": 19 * GIB}
    assert device.mps is not None and device.mps.replicas == 4


def test_the_client_at_its_limit_is_the_one_finding(tmp_path):
    report = subprocess.run(
        [sys.executable, "-m", "watchdog.cli", "replay", "--report", "json", str(_example(tmp_path))],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )
    findings = json.loads(report.stdout)["findings"]
    assert [(f["kind"], f["culprit"], f["reported_tick"]) for f in findings] == [
        ("mps_memory_limit", "batch/train", 4)]
    [finding] = findings
    assert finding["evidence"]["limit_bytes"] == 20 * GIB and finding["evidence"]["used_bytes"] == 19 * GIB
    assert finding["severity"] == "warning" and json.loads(report.stdout)["evictions"] == []
    assert "900" not in json.dumps(findings)
