"""The whole alert path on a two-node cluster: real Prometheus → real Alertmanager → controller → fake API server.

`TenantGpuQuotaExceeded` keeps the node, and the controller chooses only among the tenant's pods on it: with
`batch/train-big` over quota on node-a, the lower-priority `batch/small-job-b` on node-b is never evicted. Here two
"agents" (node-a, node-b) expose `gpu_watchdog_findings` as the agent would; Prometheus (Debian's 2.42) evaluates
the shipped alerts/gpu-watchdog.rules.yaml, with every `for:` dropped so nothing waits 15 minutes; Alertmanager
(0.25) routes with the shipped alerts/alertmanager.example.yaml, its waits shortened and its webhook pointed at a
real Controller; the Controller, in dry-run, lists and evicts through the fake API server. Both configs are
generated from the shipped files, so the test follows them.

What must happen: one eviction request per tenant and node reaches the controller, the dry-run eviction goes to the
pod on the breach's node (and, for a breach on one GPU, to the pod the agent saw there), and the pods on the other
node are never touched; a MIG instance filling up raises its own warning and no eviction request. Every wait is a
bounded poll; Prometheus is told to resend firing alerts every second (`--rules.alert.resend-delay`), since its first
notification can go out before it has found Alertmanager.
"""

from __future__ import annotations

import asyncio
import io
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import yaml
from aiohttp import web

from tests.prometheus_server import free_port, serving
from tests.waiting import poll
from watchdog.action import AuditLog
from watchdog.config.action import ActionPolicy
from watchdog.config.controller import ControllerSettings
from watchdog.controller import Controller
from watchdog.kube.client import KubeApi
from watchdog.publishing.catalogue import FINDINGS, PREFIX
from watchdog.testbed.cluster.apiserver import FakeApiServer

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = "/usr/bin/prometheus"
ALERTMANAGER = "/usr/bin/prometheus-alertmanager"
TOKEN = "e2e-webhook-token"
GPU = {"nvidia.com/gpu": "1"}
DEADLINE = 45.0  # seconds for the whole path; it takes a few on an idle machine

# What each node's agent reports. node-a: tenant batch over its GPU memory quota there (train-big uses most).
# node-b: tenant infer over its DRAM share on one time-sliced GPU (reader-b), and the MIG instance of
# batch/small-job-b past the memory warning ratio, which is not a quota breach.
FINDINGS_BY_NODE = {
    "node-a": [
        {"kind": "quota", "severity": "critical", "resource": "memory", "culprit_namespace": "batch",
         "culprit_pod": "train-big"},
    ],
    "node-b": [
        {"kind": "quota", "severity": "critical", "resource": "dram", "culprit_namespace": "infer",
         "culprit_pod": "reader-b", "gpu_uuid": "GPU-b1"},
        {"kind": "mig_memory_warning", "severity": "warning", "resource": "memory", "culprit_namespace": "batch",
         "culprit_pod": "small-job-b", "gpu_uuid": "GPU-b0", "mig_uuid": "MIG-b0-3"},
    ],
}


def exposition(node: str) -> str:
    """One agent's /metrics as far as the rules read it: ready, and its findings with the catalogue's labels."""
    lines = [f"# TYPE {PREFIX}ready gauge", f'{PREFIX}ready{{node="{node}"}} 1',
             f"# TYPE {FINDINGS.name} gauge"]
    for finding in FINDINGS_BY_NODE[node]:
        values = {label: "" for label in FINDINGS.labels} | {"node": node} | finding
        assert set(values) == set(FINDINGS.labels), "a finding label the agent does not export"
        labels = ",".join(f'{name}="{values[name]}"' for name in FINDINGS.labels)
        lines.append(f"{FINDINGS.name}{{{labels}}} 1")
    return "\n".join(lines) + "\n"


def rules_without_waits(target: Path) -> Path:
    """The shipped rule file with every `for:` removed: an alert fires on the first evaluation that matches."""
    rules = yaml.safe_load((REPO / "alerts" / "gpu-watchdog.rules.yaml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("for", None)
    target.write_text(yaml.safe_dump(rules, sort_keys=False))
    return target


def alertmanager_config(target: Path, *, webhook: str, token: Path) -> Path:
    """The shipped Alertmanager example, its waits shortened and its controller receiver pointed at `webhook`."""
    config = yaml.safe_load((REPO / "alerts" / "alertmanager.example.yaml").read_text())
    routes = [config["route"], *config["route"]["routes"]]
    for route in routes:
        route.update(group_wait="100ms", group_interval="1s")
    (receiver,) = (r for r in config["receivers"] if r["name"] == "gpu-watchdog-controller")
    (hook,) = receiver["webhook_configs"]
    hook["url"] = webhook
    hook["http_config"]["authorization"]["credentials_file"] = str(token)
    target.write_text(yaml.safe_dump(config, sort_keys=False))
    return target


@asynccontextmanager
async def process(*argv: str):
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.DEVNULL)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


def agents():
    """Both nodes' agents on one port: /node-a/metrics and /node-b/metrics."""

    def agent(node: str):
        async def metrics(_request: web.Request) -> web.Response:
            return web.Response(text=exposition(node))

        return metrics

    return serving({f"/{node}/metrics": agent(node) for node in FINDINGS_BY_NODE})


@asynccontextmanager
async def cluster(tmp_path: Path, server: FakeApiServer, api: KubeApi):
    """The fake API server with the two nodes' pods, and a dry-run Controller that leads."""
    add = server.add_pod
    add(namespace="batch", name="train-big", node="node-a", priority=100, requests=GPU)
    add(namespace="batch", name="small-job-b", node="node-b", priority=50, requests=GPU)  # lower, on the other node
    add(namespace="infer", name="reader-b", node="node-b", priority=100, requests=GPU)
    add(namespace="infer", name="low-a", node="node-a", priority=1, requests=GPU)  # lower, on the other node
    token = tmp_path / "token"
    token.write_text(TOKEN)
    settings = ControllerSettings(listen_host="127.0.0.1", listen_port=0, token_file=str(token), identity="e2e",
                                  lease_duration_seconds=2.0, renew_deadline_seconds=1.5, retry_period_seconds=0.2,
                                  cluster_evictions_per_minute=600, cluster_eviction_burst=5, plain_http=True)
    controller = Controller(settings, api=api, policy=ActionPolicy(mode="dry-run", tenant_cooldown_seconds=0),
                            audit=AuditLog(stream=io.StringIO()), namespace="gpu-watchdog")
    try:
        await controller.start()

        async def leads() -> bool:
            return controller.is_leader

        await poll(leads, what="the controller takes its Lease", timeout=DEADLINE, every=0.2)
        yield server, controller, token
    finally:
        await controller.stop()


def evictions(server: FakeApiServer) -> list[str]:
    return [path for method, path, _ in server.requests if method == "POST" and path.endswith("/eviction")]


async def test_alerts_evict_only_on_the_node_and_device_that_breached(tmp_path, server, api):
    async with cluster(tmp_path, server, api) as (server, controller, token), agents() as agents_port:
        am_port, prom_port = free_port(), free_port()
        am_config = alertmanager_config(tmp_path / "alertmanager.yml", token=token,
                                        webhook=f"{controller.url}/api/v1/alertmanager")
        prom_config = tmp_path / "prometheus.yml"
        prom_config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules_without_waits(tmp_path / "rules.yaml"))],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
            "scrape_configs": [
                {"job_name": f"gpu-watchdog-{node}", "honor_labels": True, "metrics_path": f"/{node}/metrics",
                 "static_configs": [{"targets": [f"127.0.0.1:{agents_port}"]}]}
                for node in FINDINGS_BY_NODE
            ],
        }))
        alertmanager = (ALERTMANAGER, f"--config.file={am_config}", f"--storage.path={tmp_path / 'am'}",
                        f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address=", "--log.level=warn")
        prometheus = (PROMETHEUS, f"--config.file={prom_config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                      f"--web.listen-address=127.0.0.1:{prom_port}", "--rules.alert.resend-delay=1s",
                      "--log.level=warn")
        async with process(*alertmanager), process(*prometheus), aiohttp.ClientSession() as session:

            async def alerts_in_alertmanager(name: str) -> list[dict]:
                try:
                    async with session.get(f"http://127.0.0.1:{am_port}/api/v2/alerts",
                                           params={"filter": f'alertname="{name}"'}) as response:
                        return await response.json() if response.status == 200 else []
                except aiohttp.ClientError:
                    return []

            async def both_requests_evicted() -> list[str]:
                return evictions(server) if len(evictions(server)) >= 2 else []

            await poll(both_requests_evicted, what="dry-run evictions for both breaches", timeout=DEADLINE, every=0.2)
            requests = await poll(lambda: alerts_in_alertmanager("TenantGpuQuotaExceeded"), what="eviction requests",
                                  timeout=DEADLINE, every=0.2)
            warnings = await poll(lambda: alerts_in_alertmanager("MigMemoryWarning"), what="the MIG warning",
                                  timeout=DEADLINE, every=0.2)

    # One request per tenant and node, each saying where; the GPU-bound one names the pod the agent saw there.
    asked = sorted((a["labels"]["node"], a["labels"]["namespace"], a["labels"].get("pod"), a["labels"].get("gpu_uuid"))
                   for a in requests)
    assert asked == [("node-a", "batch", None, None), ("node-b", "infer", "reader-b", "GPU-b1")]
    # The full MIG instance on node-b is a warning of its own, never an eviction request.
    assert [(w["labels"]["node"], w["labels"]["mig_uuid"]) for w in warnings] == [("node-b", "MIG-b0-3")]
    assert all("gpu_watchdog_action" not in w["labels"] for w in warnings)
    # Only the breaching node's pods were touched, in dry run; the lower-priority pods on the other nodes never.
    assert sorted(evictions(server)) == ["/api/v1/namespaces/batch/pods/train-big/eviction",
                                         "/api/v1/namespaces/infer/pods/reader-b/eviction"]
    assert all(query.get("dryRun") == "All" for method, path, query in server.requests
               if method == "POST" and path.endswith("/eviction"))
    assert server.get_pod("batch", "small-job-b") is not None and server.get_pod("infer", "low-a") is not None
    assert controller.handler.requests.get(200, 0) >= 1 and 400 not in controller.handler.requests
    assert {(result, namespace) for (result, _, namespace) in controller.evictor.counts} == {
        ("dry_run", "batch"), ("dry_run", "infer")}
