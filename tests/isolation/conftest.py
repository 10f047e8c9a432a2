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
async def cluster(tmp_path: Path):
    async with FakeApiServer() as fake:
        build_three_tenants(fake)
        fake.write_kubeconfig(tmp_path / "kubeconfig")
        yield fake


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
