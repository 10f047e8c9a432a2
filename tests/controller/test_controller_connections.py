"""The controller's probes on real sockets while someone holds 200 idle connections to its webhook port."""

from __future__ import annotations

import pytest

from tests.connection_flood import get, idle_connections
from watchdog.config.action import ActionPolicy
from watchdog.config.controller import ControllerSettings
from watchdog.controller.app import WebhookHandler
from watchdog.publishing.listener import LimitedListener


@pytest.fixture
async def controller(tmp_path):
    (tmp_path / "token").write_text("s3cr3t-token\n")
    settings = ControllerSettings(token_file=str(tmp_path / "token"), plain_http=True)
    handler = WebhookHandler(settings=settings, policy=ActionPolicy(), pods=None, evictor=None, pacer=None,
                             is_leader=lambda: False, clock=lambda: 0.0)
    # as ControllerService.start serves it, with the settings' limits
    listener = LimitedListener(handler.application(), host="127.0.0.1", port=0,
                               idle_timeout=settings.idle_timeout_seconds, max_connections=settings.max_connections)
    port = await listener.start()
    try:
        yield listener, port, settings
    finally:
        await listener.stop()


@pytest.mark.parametrize("flooder", ["127.0.0.2", "127.0.0.1"], ids=["other-address", "probe's-address"])
async def test_healthz_and_readyz_are_answered_while_200_idle_connections_are_held(controller, flooder):
    listener, port, settings = controller
    async with idle_connections(port, 200, source=flooder):
        status, body = await get(port, "/healthz", timeout=1.0)
        assert (status, body) == (200, b'{"status": "ok"}')
        status, _ = await get(port, "/readyz", timeout=1.0)
        assert status == 200
        assert listener.connections <= settings.max_connections
    assert listener.refused == 0
