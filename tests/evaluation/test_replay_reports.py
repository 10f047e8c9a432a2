"""What `gpu-watchdog replay` prints for a person: text reports, a policy diff, several traces in parallel
processes, a timeline plot; and the progress line of long runs."""

import io
import json
import re
import struct
from pathlib import Path

import pytest

from watchdog.cli import main
from watchdog.config import Policy
from watchdog.evaluation import replay, simulate
from watchdog.evaluation.progress import Progress
from watchdog.evaluation.report_text import compare
from watchdog.trace import TraceHeader, TraceWriter

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "interference-power-mig.yaml"
QUICK = {"action": {"interference": {"for_seconds": 0}}}
SLOW = {"action": {"interference": {"for_seconds": 30}}}


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("replay") / "power.jsonl.gz"
    with TraceWriter(path, header=TraceHeader(node="sim-node-1", tick_seconds=1.0, started=0.0)) as writer:
        for sample, attribution in simulate(str(SCENARIO)):
            writer.write(sample, attribution)
    return path


@pytest.fixture
def policies(tmp_path: Path) -> tuple[Path, Path]:
    quick, slow = tmp_path / "quick.yaml", tmp_path / "slow.yaml"
    quick.write_text(json.dumps(QUICK))
    slow.write_text(json.dumps(SLOW))
    return quick, slow


def test_text_report_has_a_line_per_episode_and_per_decision(trace: Path, policies, capsys) -> None:
    report = replay(trace, policy=Policy.model_validate(QUICK))
    assert main(["replay", str(trace), "--policy", str(policies[0]), "--report", "text"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{trace}: node sim-node-1, {report['ticks']} ticks")
    episodes = [line for line in lines if line.startswith("  interference")]
    assert len(episodes) == len(report["findings"]) >= 1
    assert "batch/sweep → prod/infer" in episodes[0]
    decisions = [line for line in lines if line.startswith("  tick ")]
    assert len(decisions) == len(report["evictions"]) >= 1 and "batch/sweep" in decisions[0]


def test_compare_lists_what_the_second_policy_changes(trace: Path, policies, capsys) -> None:
    quick, slow = (replay(trace, policy=Policy.model_validate(p)) for p in (QUICK, SLOW))
    diff = compare(quick, slow)
    [(a, b)] = [pair for pair in diff["evictions"]["shifted"] if pair[0]["result"] == "dry_run"]
    assert b["tick"] > a["tick"]  # waiting 30 s sends the same eviction later
    assert main(["replay", str(trace), "--policy", str(policies[0]), "--compare", str(policies[1]),
                 "--report", "text"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"  shifted +tick +{b['tick']} dry_run +batch/sweep", out)
    assert f"(A: tick {a['tick']}, B: tick {b['tick']})" in out
    assert main(["replay", str(trace), "--policy", str(policies[1]), "--compare", str(policies[1]),
                 "--report", "json"]) == 0
    same = json.loads(capsys.readouterr().out)["diff"]
    assert all(not items for section in same.values() for items in section.values())


def test_several_traces_replay_in_worker_processes(trace: Path, tmp_path: Path, capsys) -> None:
    second = tmp_path / "copy.jsonl.gz"
    second.write_bytes(trace.read_bytes())
    assert main(["replay", str(trace), str(second), "--workers", "2", "--report", "json"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert [r["trace"]["path"] for r in reports] == [str(trace), str(second)]
    assert reports[0]["findings"] == reports[1]["findings"] == replay(trace, policy=Policy())["findings"]


def test_plot_draws_a_png_per_domain(trace: Path, tmp_path: Path, policies) -> None:
    out = tmp_path / "timeline.png"
    assert main(["replay", str(trace), "--policy", str(policies[0]), "--report", "json", "--plot", str(out)]) == 0
    header = out.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", header[16:24])  # the IHDR chunk (PNG spec, 11.2.2)
    assert 800 <= width <= 2000 and 200 <= height <= 2500


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_rate_and_eta_on_a_terminal_only() -> None:
    now = [0.0]
    shown = Terminal()
    progress = Progress("replay", total=100, stream=shown, clock=lambda: now[0])
    for _ in range(50):
        now[0] += 0.02
        progress.update()
    progress.close()
    assert shown.getvalue().endswith("\rreplay: 50/100 ticks, 50 ticks/s, ETA 1 s\x1b[K\n")
    by_bytes = Progress("replay", stream=Terminal(), clock=lambda: now[0])  # total ticks unknown: bytes say how far
    now[0] += 1.0
    by_bytes.update()
    by_bytes.fraction = 0.25
    assert by_bytes.line().endswith(", 25 %, ETA 3 s")
    hidden = io.StringIO()
    quiet = Progress("replay", total=100, stream=hidden)
    quiet.update()
    quiet.close()
    assert hidden.getvalue() == ""


def test_record_fast_writes_a_compact_gzip_trace(tmp_path: Path) -> None:
    from watchdog.trace import read_trace

    out = tmp_path / "fast.jsonl.gz"
    assert main(["record", "--simulate", str(SCENARIO), "--ticks", "20", "--fast", "--out", str(out)]) == 0
    trace = read_trace(out)
    assert trace.header.version == 2 and [r.tick for r in trace] == list(range(20))
