"""Fixtures for the isolation audit: the three-tenant fake cluster and `gpu-watchdog audit` run against it."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from pathlib import Path

import pytest

from tests.isolation.three_tenants import build_three_tenants
from watchdog.cli import main
from watchdog.testbed.cluster.apiserver import FakeApiServer


@pytest.fixture
def cluster(tmp_path: Path, server: FakeApiServer) -> FakeApiServer:
    """The shared fake API server holding the three tenants, with a kubeconfig for it at tmp_path/kubeconfig."""
    build_three_tenants(server)
    server.write_kubeconfig(tmp_path / "kubeconfig")
    return server


async def run_audit_cli(*args: str) -> tuple[int, str, str]:
    """`gpu-watchdog audit ARGS` in a thread (it runs its own event loop) while the fake serves on this one."""
    out, err = io.StringIO(), io.StringIO()

    def call() -> int:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            return main(["audit", *args])

    code = await asyncio.to_thread(call)
    return code, out.getvalue(), err.getvalue()


async def audit_json(kubeconfig: Path, *args: str) -> dict:
    code, out, err = await run_audit_cli("--kubeconfig", str(kubeconfig), "-o", "json", *args)
    assert "Traceback" not in err, err
    return {"exit": code, **json.loads(out)}
