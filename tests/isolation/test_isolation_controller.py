"""The controller's periodic isolation audit: the leader audits the three-tenant cluster and /metrics shows the
scorecard as gpu_watchdog_isolation_check{tenant,check,result}, which `promtool check metrics` accepts."""

from __future__ import annotations

import io
import shutil
import subprocess

import aiohttp

from tests.fake_api import FakeApi
from tests.isolation.three_tenants import build_three_tenants
from tests.waiting import poll
from watchdog.action import AuditLog
from watchdog.config.action import ActionPolicy
from watchdog.config.controller import ControllerSettings
from watchdog.controller import Controller
from watchdog.controller.isolation_audit import IsolationAuditor
from watchdog.isolation import AuditSettings
from watchdog.kube.client import KubeApi
from watchdog.testbed.cluster.apiserver import FakeApiServer


async def scrape(url: str) -> str:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{url}/metrics") as response:
            return await response.text()


async def test_the_leader_exports_the_isolation_scorecard(tmp_path, server: FakeApiServer, api: KubeApi):
    (tmp_path / "token").write_text("t")
    settings = ControllerSettings(listen_host="127.0.0.1", listen_port=0, plain_http=True,
                                  token_file=str(tmp_path / "token"), identity="c1", lease_duration_seconds=2.0,
                                  renew_deadline_seconds=1.5, retry_period_seconds=0.2, isolation_audit_minutes=5)
    api.restrict_to_declared_permissions()  # as in production: only calls the chart's RBAC grants
    build_three_tenants(server)
    controller = Controller(settings, api=api, policy=ActionPolicy(), audit=AuditLog(stream=io.StringIO()),
                            namespace="gpu-watchdog")
    await controller.start()
    try:
        await poll(lambda: controller.isolation.latest is not None, what="the Lease taken and the first audit done",
                   timeout=5.0, every=0.05)
        text = await scrape(controller.url)
    finally:
        await controller.stop()
    lines = set(text.splitlines())
    assert 'gpu_watchdog_isolation_check{check="gpu-quota",result="fail",tenant="team-b"} 1.0' in lines
    assert 'gpu_watchdog_isolation_check{check="default-deny",result="fail",tenant="team-b"} 1.0' in lines
    assert 'gpu_watchdog_isolation_check{check="sharing-mode",result="warn",tenant="team-c"} 1.0' in lines
    assert 'gpu_watchdog_isolation_check{check="gpu-quota",result="pass",tenant="team-a"} 1.0' in lines
    assert 'gpu_watchdog_isolation_tenant_gpu_pods{tenant="team-a"} 1.0' in lines
    assert 'gpu_watchdog_isolation_audits_total{result="success"} 1.0' in lines
    assert sum(1 for line in lines if line.startswith("gpu_watchdog_isolation_check{")) == 33  # 3 tenants x 11 checks
    checked = subprocess.run([shutil.which("promtool") or "promtool", "check", "metrics"], input=text,
                             capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


async def test_an_unreachable_cluster_is_counted_and_keeps_the_previous_scorecard(fake_api: FakeApi,
                                                                                    server: FakeApiServer):
    build_three_tenants(server)
    auditor = IsolationAuditor(await fake_api.client(server, timeout=2.0), interval=60, settings=AuditSettings())
    first = await auditor.audit_once()
    server.fail_next(1, status=503)  # the namespaces list: the cluster is unreadable
    second = await auditor.audit_once()
    assert second.errors == ["cannot list namespaces: 503: injected fault"] and not second.results
    assert auditor.latest is first and dict(auditor.runs) == {"success": 1, "failure": 1}
