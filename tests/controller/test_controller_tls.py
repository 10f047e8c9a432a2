"""The webhook over real TLS (certificates from trustme): HTTPS by default, the certificate followed as its files are
renewed, the last good pair kept when a renewal does not load, and plain HTTP only when asked for."""

from __future__ import annotations

import asyncio
import io
import os
import socket
import ssl
from datetime import datetime, timezone

import aiohttp
import pytest
import trustme
from aiohttp import web

from controller_payloads import alert, body
from tests.waiting import poll
from watchdog.action import AuditLog
from watchdog.config.action import ActionPolicy
from watchdog.config.controller import ControllerSettings
from watchdog.controller import Controller
from watchdog.controller.app import WebhookHandler
from watchdog.controller.tls import ReloadingServerContext
from watchdog.kube.client import KubeApi
from watchdog.publishing.listener import LimitedListener

TOKEN = "tls-token"
BOUND = 10.0  # seconds: only keeps a broken build from hanging; nothing is asserted about durations


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


def write_pair(ca: trustme.CA, directory, *, organization: str) -> tuple[str, str]:
    """Issue a server certificate for 127.0.0.1 and write it as cert-manager's Secret would mount it."""
    cert = ca.issue_cert("127.0.0.1", "localhost", organization_name=organization)
    chain = b"".join(blob.bytes() for blob in cert.cert_chain_pems)
    return replace(directory / "tls.crt", chain), replace(directory / "tls.key", cert.private_key_pem.bytes())


def replace(path, data: bytes) -> str:
    """Write a new file in place of ``path`` (a new inode, as the kubelet's atomic Secret update gives)."""
    fresh = path.with_suffix(".new")
    fresh.write_bytes(data)
    os.replace(fresh, path)
    return str(path)


def client_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


async def served_organization(port: int, context: ssl.SSLContext) -> str:
    """The organization named in the certificate the server presents to a new connection."""
    _, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"), BOUND)
    try:
        subject = dict(item[0] for item in writer.get_extra_info("peercert")["subject"])
        return subject["organizationName"]
    finally:
        writer.close()
        await writer.wait_closed()


@pytest.fixture
async def tls_listener(ca, tmp_path):
    cert_file, key_file = write_pair(ca, tmp_path, organization="first")
    certificate = ReloadingServerContext(cert_file, key_file)
    app = web.Application()  # no route: the handshake is what these tests look at
    listener = LimitedListener(app, host="127.0.0.1", port=0, idle_timeout=30, max_connections=8,
                               ssl_context=certificate.context)
    port = await listener.start()
    try:
        yield certificate, port, tmp_path
    finally:
        await listener.stop()


async def test_a_renewed_certificate_is_served_to_the_next_connection(ca, tls_listener):
    certificate, port, directory = tls_listener
    context = client_context(ca)
    assert await served_organization(port, context) == "first"
    write_pair(ca, directory, organization="renewed")
    assert await served_organization(port, context) == "renewed"
    assert certificate.reloads == 1


async def test_a_renewal_that_does_not_load_keeps_the_last_good_pair(ca, tls_listener):
    certificate, port, directory = tls_listener
    context = client_context(ca)
    replace(directory / "tls.key", trustme.CA().issue_cert("127.0.0.1").private_key_pem.bytes())  # not the cert's
    assert await served_organization(port, context) == "first"
    assert certificate.failures == 1
    write_pair(ca, directory, organization="fixed")
    assert await served_organization(port, context) == "fixed"


def controller(settings: ControllerSettings, api: KubeApi) -> Controller:
    return Controller(settings, api=api, policy=ActionPolicy(), audit=AuditLog(stream=io.StringIO()),
                      namespace="gpu-watchdog")


async def test_the_controller_serves_https_by_default(ca, api, tmp_path):
    cert_file, key_file = write_pair(ca, tmp_path, organization="webhook")
    (tmp_path / "token").write_text(TOKEN)
    settings = ControllerSettings(listen_host="127.0.0.1", listen_port=0, token_file=str(tmp_path / "token"),
                                  tls_cert_file=cert_file, tls_key_file=key_file, lease_namespace="gpu-watchdog")
    built = controller(settings, api)
    url = await built.start()
    try:
        assert url.startswith("https://127.0.0.1:")
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}/healthz", ssl=client_context(ca)) as response:
                assert response.status == 200
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with session.post(f"{url}/api/v1/alertmanager", data=body(alert(status="resolved")),
                                    headers=headers, ssl=client_context(ca)) as response:
                assert response.status in (200, 503)  # 503 until this replica holds the Lease
            with pytest.raises(aiohttp.ClientError):  # plain HTTP is not served on the HTTPS port
                async with session.get(url.replace("https://", "http://") + "/healthz") as response:
                    await response.read()
    finally:
        await built.stop()


async def test_no_certificate_no_start_unless_plain_http_is_asked_for(api, tmp_path):
    (tmp_path / "token").write_text(TOKEN)
    missing = ControllerSettings(listen_host="127.0.0.1", listen_port=0, token_file=str(tmp_path / "token"),
                                 tls_cert_file=str(tmp_path / "absent.crt"), tls_key_file=str(tmp_path / "absent.key"))
    with pytest.raises(OSError):
        await controller(missing, api).start()
    plain = controller(missing.model_copy(update={"plain_http": True}), api)
    url = await plain.start()
    try:
        assert url.startswith("http://")
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}/healthz") as response:
                assert response.status == 200
    finally:
        await plain.stop()


ALERTMANAGER = "/usr/bin/prometheus-alertmanager"
AM_CONFIG = """
route: {{receiver: controller, group_by: [alertname], group_wait: 100ms, group_interval: 1s, repeat_interval: 1h}}
receivers:
  - name: controller
    webhook_configs:
      - url: https://127.0.0.1:{port}/api/v1/alertmanager
        http_config:
          authorization: {{type: Bearer, credentials_file: {token}}}
          tls_config: {{ca_file: {ca}}}
"""


async def test_a_real_alertmanager_delivers_over_https_with_its_ca_file(ca, tmp_path):
    """Alertmanager 0.25's own HTTP client (Go crypto/tls) verifies the webhook's certificate against `ca_file`."""
    cert_file, key_file = write_pair(ca, tmp_path, organization="webhook")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    (tmp_path / "token").write_text(TOKEN)
    handler = WebhookHandler(settings=ControllerSettings(token_file=str(tmp_path / "token")), policy=ActionPolicy(),
                             pods=None, evictor=None, pacer=None, is_leader=lambda: False, clock=lambda: 0.0)
    listener = LimitedListener(handler.application(), host="127.0.0.1", port=0, idle_timeout=30, max_connections=8,
                               ssl_context=ReloadingServerContext(cert_file, key_file).context)
    port = await listener.start()
    config = tmp_path / "alertmanager.yml"
    config.write_text(AM_CONFIG.format(port=port, token=tmp_path / "token", ca=tmp_path / "ca.crt"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        am_port = probe.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        ALERTMANAGER, f"--config.file={config}", f"--storage.path={tmp_path / 'am-data'}",
        f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address=", "--log.level=warn",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    alert = [{"labels": {"alertname": "GpuWatchdogQuotaBreach", "namespace": "team-b", "node": "node-1",
                         "gpu_watchdog_action": "evict"}, "startsAt": datetime.now(timezone.utc).isoformat()}]
    try:
        async with aiohttp.ClientSession() as session:

            async def delivered() -> bool:
                try:
                    async with session.post(f"http://127.0.0.1:{am_port}/api/v2/alerts", json=alert) as response:
                        return response.status == 200 and bool(handler.requests)
                except aiohttp.ClientError:
                    return False

            await poll(delivered, what="Alertmanager starting, then notifying", timeout=BOUND, every=0.1)
    finally:
        process.terminate()
        await process.wait()
        await listener.stop()
    assert handler.requests.get(503)  # authenticated and parsed over TLS; this replica is no leader, so 503
