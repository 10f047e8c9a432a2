"""The standard process_* metrics on /metrics, and a real Prometheus scraping them gzipped beside the node's series.

Prometheus asks for gzip; with process_* the body is one gzip member: process_* compressed per scrape in front of
the snapshot body's cached compressed data (the first cut used two members, which curl, like every zlib reader
that stops at the first member, showed as process_* alone). The scrape below proves it with Debian's Prometheus
2.42, and a first-member-only decoder proves nothing follows the member.
"""

from __future__ import annotations

import gzip
import subprocess
import time
import zlib

import aiohttp
import pytest
from tests.prometheus_server import prometheus as real_prometheus
from tests.waiting import poll
from watchdog.config.publishing import PublishingSettings
from watchdog.publishing import render
from watchdog.publishing.process_metrics import ProcessMetrics, prepend_to_gzip
from watchdog.publishing.server import MetricsServer

PROCESS_FAMILIES = ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
                    "process_start_time_seconds", "process_max_fds", "process_virtual_memory_bytes")


def samples(text: str) -> dict[str, float]:
    """Series (name and labels) → value; label values may hold spaces, the value is the last field."""
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and line[0] != "#"}


def test_process_metrics_describe_this_process():
    values = samples(ProcessMetrics().body(openmetrics=False).decode())
    assert set(values) == set(PROCESS_FAMILIES)
    assert values["process_open_fds"] >= 3 and values["process_resident_memory_bytes"] > 0
    assert values["process_start_time_seconds"] <= time.time()
    openmetrics = ProcessMetrics().body(openmetrics=True).decode()
    assert "# TYPE process_cpu_seconds counter" in openmetrics and "# EOF" not in openmetrics


@pytest.mark.parametrize("openmetrics", [False, True])
def test_one_gzip_member_holds_process_and_snapshot(rich_snapshot, openmetrics):
    plain = render(rich_snapshot, openmetrics)
    process = ProcessMetrics().body(openmetrics=openmetrics)
    joined = prepend_to_gzip(process, gzipped_tail=gzip.compress(plain, compresslevel=1, mtime=0), plain_tail=plain)
    first_member = zlib.decompressobj(wbits=31)  # as curl: one member, then stop
    assert first_member.decompress(joined) == process + plain
    assert first_member.eof and first_member.unused_data == b""
    assert gzip.decompress(joined) == process + plain  # CRC32 and size of the whole checked


def test_no_proc_means_no_process_series_not_a_failed_scrape(tmp_path):
    missing = ProcessMetrics(proc_root=str(tmp_path / "no-proc"))
    assert samples(missing.body(openmetrics=False).decode()) == {}


async def test_the_body_passes_promtool_and_can_be_switched_off(rich_snapshot):
    body = {}
    for enabled in (True, False):
        settings = PublishingSettings(host="127.0.0.1", port=0, process_metrics=enabled)
        server = MetricsServer.from_settings(settings, snapshot_provider=lambda: rich_snapshot, alive=lambda: True)
        port = await server.start()
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                    body[enabled] = await response.text()
        finally:
            await server.stop()
    assert body[False] == render(rich_snapshot, False).decode()
    assert body[True].endswith(body[False]) and set(PROCESS_FAMILIES) <= set(samples(body[True]))
    check = subprocess.run(["promtool", "check", "metrics"], input=body[True], capture_output=True, text=True,
                           timeout=60, check=False)
    assert check.returncode == 0, check.stdout + check.stderr


async def test_a_real_prometheus_scrapes_both_gzip_members(rich_snapshot, tmp_path):
    """Prometheus 2.42 asks for OpenMetrics and gzip: it must store the process and the node series alike."""
    server = MetricsServer.from_settings(PublishingSettings(host="127.0.0.1", port=0),
                                         snapshot_provider=lambda: rich_snapshot, alive=lambda: True)
    target = await server.start()
    query = 'count({job="agent", __name__=~"process_open_fds|gpu_watchdog_ready"})'
    try:
        with real_prometheus(tmp_path, target_port=target, job="agent", honor_labels=False) as url:
            async with aiohttp.ClientSession() as session:

                async def both_stored() -> bool:
                    try:
                        async with session.get(f"{url}/api/v1/query", params={"query": query}) as response:
                            result = (await response.json())["data"]["result"]
                    except (aiohttp.ClientError, KeyError):
                        return False
                    return bool(result) and float(result[0]["value"][1]) >= 2

                # Bounded: Prometheus starts, then scrapes once a second.
                await poll(both_stored, what="Prometheus to store both the process and the node series", timeout=60.0,
                           every=0.5)
                async with session.get(f"{url}/api/v1/query",
                                       params={"query": 'scrape_samples_scraped{job="agent"}'}) as response:
                    scraped = float((await response.json())["data"]["result"][0]["value"][1])
    finally:
        await server.stop()
    assert scraped == len(samples(render(rich_snapshot, False).decode())) + len(PROCESS_FAMILIES)
    assert server.scrape_failures == 0
