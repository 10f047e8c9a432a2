"""Golden exposition: the demo node at simulated tick 25, rendered by the real server, equals the committed file.

Values that depend on the machine rather than on the scenario (stage durations, the Python version in
build_info) are normalised before the comparison. Regenerate after an intended change with
``GOLDEN_UPDATE=1 make test PYTEST_ARGS=tests/service/test_golden.py`` and review the diff.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import aiohttp

from tests.service.conftest import SCENARIOS
from tests.waiting import poll

GOLDEN = Path(__file__).with_name("golden") / "metrics.prom"
TICKS = 25
XID_TICK = 20


def normalise(body: str) -> str:
    # process_* (CPU seconds, memory, fds of the test process) describe the process, not the scenario: left out
    # here, checked in tests/publishing/test_publishing_process.py.
    body = re.sub(r"^(# (HELP|TYPE) )?process_\S*[ {].*\n", "", body, flags=re.M)
    body = re.sub(r"^(gpu_watchdog_stage_duration_seconds\{[^}]*\}) \S+$", r"\1 0", body, flags=re.M)
    return re.sub(r'python="[^"]*"', 'python="X"', body)


async def test_demo_exposition_matches_golden_and_promtool_accepts_it(drive, tmp_path):
    driver = await drive(SCENARIOS / "demo.yaml")
    await driver.ticks(XID_TICK + 1, sync=True)
    # The Xid at tick 20 travels through the event thread: wait for it, so the tick it is counted in is fixed.
    await poll(lambda: driver.agent.state.pending_xids or driver.agent.state.xid_counts, what="the Xid event")
    await driver.ticks(TICKS - XID_TICK - 1, sync=True)
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{driver.agent.port}/metrics") as response:
            assert response.status == 200
            body = normalise(await response.text())
    assert 'pod="inference-0"' in body and "gpu_watchdog_xid_errors_total{" in body
    if os.environ.get("GOLDEN_UPDATE"):
        GOLDEN.write_text(body)
    assert body == GOLDEN.read_text()
    check = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.strip() == "" and check.stderr.strip() == ""
