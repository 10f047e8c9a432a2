"""Every dashboard panel shows data against a real Prometheus holding the demo's series.

A panel whose query is valid PromQL can still be blank: `increase()` reads 0 for a counter born at 1, so "Xid
events" stayed empty while `xid_errors_total` was 1. This test runs the production agent on the demo scenario for
two simulated minutes (the Xid at tick 20, the first dry-run eviction at tick 63), fetches /metrics over HTTP after
every tick as Prometheus would (OpenMetrics), backfills those samples into a TSDB with `promtool tsdb
create-blocks-from openmetrics` (so no test waits for real scrapes), starts Debian's Prometheus on it and runs every
panel query through the HTTP API the way Grafana does: instant targets at the end of the range, the others as a
range query. A panel the scenario feeds must return at least one series.
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import time

import aiohttp
import pytest

from tests.dashboards.test_dashboards import FILES, all_panels, load
from tests.service.conftest import SCENARIOS, Driver
from tests.prometheus_server import prometheus as real_prometheus
from watchdog.kube.client import KubeApi
from watchdog.service.agent import Agent
from watchdog.testbed.clock import SimClock
from watchdog.testbed.world import SimulatedWorld

TICKS = 120
OPENMETRICS = "application/openmetrics-text;version=1.0.0"
VGPU_SCENARIO = "tp-vgpu-best-effort-contention.yaml"
VGPU_PANELS = ("vGPU framebuffer used / total", "vGPU SM utilisation", "vGPU memory-controller utilisation",
               "vGPU scheduler policy", "vGPU adaptive round-robin", "vGPU scheduler time slice",
               "vGPU scheduler runlists: GPU time run")
# Panels the demo gives no data, and why. Every other panel must show a series.
MAY_BE_EMPTY = {
    "Errors": "the demo's stages do not fail",
    "Policy reloads": "no policy file is reloaded",
    "Isolation scorecard": "the controller's isolation audit feeds it; the demo runs the agent only",
    "Lost GPUs over time": "no GPU falls off the bus (the time series shows `== 1` only)",
    "GPU SM activity (GPUs not in MIG mode)": "the only non-MIG GPU is an A100, which has no GPM (Hopper and newer)",
    "GPU DRAM bandwidth (GPUs not in MIG mode)": "the same: GPM DRAM_BW_UTIL needs Hopper or newer",
    # One target of a panel ("title [refId]"): the panel's other targets must still show a series.
    "Context switching [A]": "whole-GPU GPM context switching: the demo's only non-MIG GPU is an A100 (no GPM)",
    "Context switching [C]": "the same, switches per second",
    # The demo node has no vGPU host: test_every_vgpu_panel_shows_a_vgpu_host runs a vGPU scenario for these.
    **{title: "the demo has no vGPU host GPU" for title in VGPU_PANELS},
}


async def demo_bodies(tmp_path, epoch: float, scenario: str = "demo.yaml") -> list[tuple[float, str]]:
    """(timestamp, OpenMetrics body) after each of TICKS cycles of the agent on the scenario's world."""
    world = SimulatedWorld(SCENARIOS / scenario, workdir=tmp_path / "world", clock=SimClock(epoch=epoch))
    await world.start()
    kube = KubeApi.from_url(world.api.url)
    agent = Agent(world.settings(sampling={"event_wait_ms": 20}), nvml=world.nvml, clock=world.clock, kube=kube)
    driver = Driver(world, agent, kube)
    bodies = []
    try:
        await driver.start()
        async with aiohttp.ClientSession() as session:
            for _ in range(TICKS):
                stamp = world.clock.now()
                await agent.cycle_once()
                async with session.get(f"http://127.0.0.1:{agent.port}/metrics",
                                       headers={"Accept": OPENMETRICS}) as response:
                    bodies.append((stamp, await response.text()))
                world.advance(world.scenario.tick_seconds)
                await asyncio.sleep(0)
    finally:
        await driver.stop()
        await world.stop()
    return bodies


def backfill_file(bodies: list[tuple[float, str]]) -> str:
    """One OpenMetrics document with every body's samples stamped: each family once, its samples in time order."""
    headers: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    for stamp, body in bodies:
        family = None
        for line in body.splitlines():
            if line == "# EOF" or not line:
                continue
            if line.startswith("# "):
                family = line.split()[2]
                if family not in samples:
                    headers.setdefault(family, []).append(line)
                continue
            samples.setdefault(family, []).append(f"{line} {stamp:.3f}")
        for family in headers:
            samples.setdefault(family, [])
    out = [line for family in headers for line in headers[family] + samples[family]]
    return "\n".join(out + ["# EOF"]) + "\n"


@pytest.fixture
async def demo_prometheus(tmp_path):
    """(url, start, end): a real Prometheus whose TSDB holds two minutes of the demo, ending a minute ago."""
    async for answer in scenario_prometheus(tmp_path, "demo.yaml"):
        yield answer


@pytest.fixture
async def vgpu_prometheus(tmp_path):
    """The same, holding two minutes of a vGPU host (KubeVirt VMs under the best-effort vGPU scheduler)."""
    async for answer in scenario_prometheus(tmp_path, VGPU_SCENARIO):
        yield answer


async def scenario_prometheus(tmp_path, scenario: str):
    start = math.floor(time.time()) - TICKS - 60
    bodies = await demo_bodies(tmp_path, float(start), scenario)
    source = tmp_path / "demo.om"
    source.write_text(backfill_file(bodies), encoding="utf-8")
    data = tmp_path / "data"
    done = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    with real_prometheus(tmp_path, target_port=None, scrape_interval="1m", data=data) as url:
        async with aiohttp.ClientSession() as session:
            deadline = asyncio.get_running_loop().time() + 60  # bounded: Prometheus opens the blocks, then answers
            while True:
                try:
                    async with session.get(f"{url}/-/ready") as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                assert asyncio.get_running_loop().time() < deadline, "Prometheus did not become ready"
                await asyncio.sleep(0.2)
        yield url, start, start + TICKS - 1


def grafana_expr(expr: str, *, span: int) -> str:
    """What Grafana sends for the dashboard range [start, end] with every node and namespace selected."""
    for variable, value in {"$__rate_interval": "1m", "$__range": f"{span}s", "$node": ".*",
                            "$namespace": ".*"}.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, expr
    return expr


async def series_count(session, url: str, *, expr: str, instant: bool, start: int, end: int) -> int:
    if instant:
        params = {"query": expr, "time": str(end)}
        path = "/api/v1/query"
    else:
        params = {"query": expr, "start": str(start), "end": str(end), "step": "5"}
        path = "/api/v1/query_range"
    async with session.get(url + path, params=params) as response:
        body = await response.json()
    assert body["status"] == "success", (expr, body)
    return len(body["data"]["result"])


async def test_every_panel_shows_the_demo(demo_prometheus):
    url, start, end = demo_prometheus
    empty, shown = [], []
    async with aiohttp.ClientSession() as session:
        for name in FILES:
            for panel in all_panels(load(name)):
                for target in panel.get("targets", []):
                    expr = grafana_expr(target["expr"], span=end - start + 1)
                    found = await series_count(session, url, expr=expr, instant=bool(target.get("instant")),
                                               start=start, end=end)
                    if not found and f"{panel['title']} [{target['refId']}]" in MAY_BE_EMPTY:
                        continue
                    (shown if found else empty).append(panel["title"])
    assert sorted(set(empty) - set(MAY_BE_EMPTY)) == [], sorted(set(empty))
    # the panels of the defect: counters born at 1 (an Xid; one dry-run eviction per finding)
    for title in ("Xid events in the time range", "Xid events", "Eviction decisions by result",
                  "Eviction decisions in the time range"):
        assert title in shown, title
    # The table counts every decision once: a series born at 1 counts 1, not 0 (increase alone).
    [panel] = [p for p in all_panels(load("gpu-watchdog-actions.json"))
               if p["title"] == "Eviction decisions in the time range"]
    expr = grafana_expr(panel["targets"][0]["expr"], span=end - start + 1)
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{url}/api/v1/query", params={"query": expr, "time": str(end)}) as response:
            result = (await response.json())["data"]["result"]
    rows = {(r["metric"]["result"], r["metric"]["reason"], r["metric"]["namespace"]): float(r["value"][1])
            for r in result}
    assert any(result == "dry_run" for result, _, _ in rows), rows  # the demo's first dry-run evictions
    assert min(rows.values()) >= 1.0, rows  # born at 1 and never reset: every row counts at least its first decision


async def test_every_vgpu_panel_shows_a_vgpu_host(vgpu_prometheus):
    url, start, end = vgpu_prometheus
    panels = {panel["title"]: panel for name in FILES for panel in all_panels(load(name))}
    assert set(VGPU_PANELS) <= set(panels), sorted(set(VGPU_PANELS) - set(panels))
    async with aiohttp.ClientSession() as session:
        for title in VGPU_PANELS:
            for target in panels[title].get("targets", []):
                expr = grafana_expr(target["expr"], span=end - start + 1)
                found = await series_count(session, url, expr=expr, instant=bool(target.get("instant")),
                                           start=start, end=end)
                assert found, (title, target["refId"], expr)
