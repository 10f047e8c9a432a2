"""The hand-written vGPU trace of docs/trace-format.md replays as the document says: one interference finding in the
best-effort vGPU domain naming the culprit VM's launcher pod and both VMIs, and none when the scheduler gives each VM
a fixed slice."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVE = "prod/virt-launcher-serve-vm-7x2kq"
TRAIN = "batch/virt-launcher-train-vm-p4m9z"


def _example(tmp_path: Path, *, scheduler: str | None = None) -> Path:
    text = (ROOT / "docs" / "trace-format.md").read_text(encoding="utf-8")
    section = text.split("## A hand-written vGPU GPU", 1)[1]
    block = re.search(r"```json\n(.*?)\n```", section, re.S).group(1)
    if scheduler is not None:
        block = block.replace('"vgpu_scheduler": "best_effort"', f'"vgpu_scheduler": "{scheduler}"')
    path = tmp_path / "vgpu.jsonl"
    path.write_text(block + "\n", encoding="utf-8")
    return path


def _replay(path: Path) -> dict:
    report = subprocess.run(
        [sys.executable, "-m", "watchdog.cli", "replay", "--report", "json", str(path)],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert report.returncode == 0, report.stderr
    return json.loads(report.stdout)


def test_the_vm_that_takes_its_neighbours_share_is_the_one_finding(tmp_path):
    report = _replay(_example(tmp_path))
    findings = report["findings"]
    assert [(f["kind"], f["domain"], f["culprit"], f["victims"], f["reported_tick"]) for f in findings] == [
        ("interference", "vgpu/GPU-v", TRAIN, [SERVE], 14)]
    [finding] = findings
    assert finding["evidence"]["culprit_vmi"] == "train-vm" and finding["evidence"]["vmi"] == "serve-vm"
    assert finding["severity"] == "critical" and finding["tenant"] == "batch"


@pytest.mark.parametrize("scheduler", ["equal_share", "fixed_share"])
def test_the_same_readings_under_a_fixed_slice_scheduler_give_nothing(tmp_path, scheduler):
    path = _example(tmp_path, scheduler=scheduler)
    assert scheduler in path.read_text(encoding="utf-8")
    assert _replay(path)["findings"] == []


def _replay_with(path: Path, policy: Path) -> dict:
    report = subprocess.run(
        [sys.executable, "-m", "watchdog.cli", "replay", "--report", "json", "--policy", str(policy), str(path)],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert report.returncode == 0, report.stderr
    return json.loads(report.stdout)


def _without_vmis(path: Path) -> Path:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for line in lines:
        line.get("attribution", {}).pop("vmis", None)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_under_enforce_the_culprit_vm_is_migrated_and_without_its_vmi_it_is_never_a_candidate(tmp_path):
    policy = tmp_path / "enforce.yaml"
    policy.write_text("action:\n  mode: enforce\n  interference: {for_seconds: 0}\n", encoding="utf-8")
    evictions = _replay_with(_example(tmp_path), policy)["evictions"]
    sent = [(f"{e['namespace']}/{e['pod']}", e["result"]) for e in evictions if e["sent"]]
    assert sent == [(TRAIN, "migrating")]
    blind = _replay_with(_without_vmis(_example(tmp_path)), policy)["evictions"]
    assert blind and not any(e["sent"] for e in blind)
    assert {e["result"] for e in blind if e["pod"] == TRAIN.split("/")[1]} == {"unsafe"}
