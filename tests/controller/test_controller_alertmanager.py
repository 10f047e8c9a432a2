"""A real Alertmanager (Debian's prometheus-alertmanager 0.25) drives the controller's webhook.

The alert is POSTed straight to Alertmanager's /api/v2/alerts (Prometheus' first notification can be lost before
it discovers Alertmanager, as seen with Debian's Prometheus 2.42; a resend waits for --rules.alert.resend-delay);
the webhook is authenticated with
http_config.authorization.credentials_file, as a deployment would. Only bounded polling, no sleeps to wait out.
"""

from __future__ import annotations

import asyncio
import io
import socket
from datetime import datetime, timezone

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from controller_fakes import MemoryKube, gpu_pod
from tests.waiting import poll
from watchdog.action import AuditLog, Evictor, Pacer
from watchdog.config.action import ActionPolicy
from watchdog.config.controller import ControllerSettings
from watchdog.controller.app import WebhookHandler

ALERTMANAGER = "/usr/bin/prometheus-alertmanager"

CONFIG = """
route:
  receiver: gpu-watchdog
  group_by: [alertname, namespace, pod]
  group_wait: 100ms
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: gpu-watchdog
    webhook_configs:
      - url: {url}/api/v1/alertmanager
        send_resolved: true
        http_config:
          authorization:
            type: Bearer
            credentials_file: {token}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
async def controller(tmp_path):
    token = tmp_path / "token"
    token.write_text("am-s3cr3t")
    kube = MemoryKube(pods=[gpu_pod("batch"), gpu_pod("train", priority=10)])
    policy = ActionPolicy(mode="dry-run")
    pacer = Pacer(policy)
    evictor = Evictor(kube, policy=policy, pacer=pacer, audit=AuditLog(stream=io.StringIO()), clock=lambda: 1.0,
                      node="controller-0", kill_switch=None)
    handler = WebhookHandler(settings=ControllerSettings(token_file=str(token)), policy=policy, pods=kube,
                             evictor=evictor, pacer=pacer, is_leader=lambda: True, clock=lambda: 1.0)
    server = TestServer(handler.application(), host="127.0.0.1")
    await server.start_server()
    try:
        yield server, kube, handler, token
    finally:
        await server.close()


@pytest.fixture
async def alertmanager(tmp_path, controller):
    server, _, _, token = controller
    config = tmp_path / "alertmanager.yml"
    config.write_text(CONFIG.format(url=str(server.make_url("")).rstrip("/"), token=token))
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        ALERTMANAGER, f"--config.file={config}", f"--storage.path={tmp_path / 'am-data'}",
        f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=warn",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:

            async def ready():
                try:
                    async with session.get(f"{base}/-/ready") as response:
                        return response.status == 200
                except aiohttp.ClientError:
                    return False

            await poll(ready, what="Alertmanager ready", timeout=15.0, every=0.1)
            yield base, session
    finally:
        process.terminate()
        await process.wait()


async def test_real_alertmanager_drives_a_dry_run_eviction(controller, alertmanager):
    _, kube, handler, _ = controller
    base, session = alertmanager
    now = datetime.now(timezone.utc).isoformat()
    alerts = [
        {"labels": {"alertname": "GpuWatchdogQuotaBreach", "namespace": "team-b", "node": "node-1",
                    "gpu_watchdog_action": "evict"},
         "annotations": {"summary": "team-b over its GPU quota"}, "startsAt": now},
        {"labels": {"alertname": "GpuWatchdogInfo", "namespace": "team-b"}, "startsAt": now},
    ]
    async with session.post(f"{base}/api/v2/alerts", json=alerts) as response:
        assert response.status == 200

    async def evicted():
        return kube.evictions

    # Namespace-only alert: the tenant's lowest-priority GPU pod, dry-run only.
    assert await poll(evicted, what="the dry-run eviction", timeout=15.0, every=0.1) == [("team-b/batch", True)]
    assert handler.requests.get(200, 0) >= 1 and 401 not in handler.requests
