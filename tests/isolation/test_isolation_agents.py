"""The audit reads the agents' attribution back from a real Prometheus (Debian's) to name who shares each GPU and
which driver a node runs; an unreachable Prometheus is one line, and the audit falls back to pods' nodes."""

from __future__ import annotations

import asyncio

import pytest

from tests.isolation.conftest import audit_json
from tests.prometheus_server import free_port, serving_metrics
from tests.prometheus_server import prometheus as real_prometheus
from watchdog.controller.agent_observations import read_agent_observations

AGENT_SERIES = """\
# TYPE gpu_watchdog_pod_gpu_memory_used_bytes gauge
gpu_watchdog_pod_gpu_memory_used_bytes{node="gpu-ts",gpu="0",gpu_uuid="GPU-TS-0",mig_uuid="",namespace="team-b",\
pod="infer",container="main"} 1e9
gpu_watchdog_pod_gpu_memory_used_bytes{node="gpu-ts",gpu="0",gpu_uuid="GPU-TS-0",mig_uuid="",namespace="team-c",\
pod="batch",container="main"} 2e9
gpu_watchdog_pod_gpu_memory_used_bytes{node="gpu-ts",gpu="1",gpu_uuid="GPU-TS-1",mig_uuid="",namespace="",\
pod="",container=""} 1e6
# TYPE gpu_watchdog_mig_memory_used_bytes gauge
gpu_watchdog_mig_memory_used_bytes{node="gpu-mig",gpu="0",gpu_uuid="GPU-MIG-0",mig_uuid="MIG-1",gpu_instance="7",\
compute_instance="0",profile="1g.10gb",namespace="team-a",pod="train",container="main"} 3e9
# TYPE gpu_watchdog_build_info gauge
gpu_watchdog_build_info{node="gpu-mig",version="0.1.0",python="3.11",driver_version="550.54.15"} 1
"""



@pytest.fixture
async def prometheus(tmp_path):
    """A real Prometheus scraping the agents' series every second (honor_labels: the agents' `node` is kept)."""
    async with serving_metrics(lambda: AGENT_SERIES) as target_port:
        with real_prometheus(tmp_path, target_port=target_port, job="agents") as url:
            for _ in range(300):  # bounded: Prometheus starts and scrapes once within a few seconds
                users, drivers, _ = await read_agent_observations(url, timeout=1.0)
                if users and drivers:
                    break
                await asyncio.sleep(0.1)
            yield url


async def test_the_agents_name_the_shared_gpu_and_the_unlabelled_driver(cluster, tmp_path, prometheus):
    nodes = cluster._resource("nodes")
    node = cluster.store.get(nodes, "", "gpu-mig")
    del node["metadata"]["labels"]["nvidia.com/cuda.driver-version.full"]  # only the agent knows it now
    cluster.store.update(nodes, node)
    assert await read_agent_observations(prometheus) == (
        {("gpu-ts", "GPU-TS-0"): frozenset({"team-b", "team-c"}), ("gpu-mig", "GPU-MIG-0"): frozenset({"team-a"})},
        {"gpu-mig": "550.54.15"}, None)
    report = await audit_json(tmp_path / "kubeconfig", "--prometheus", prometheus)
    checks = {(t["tenant"], c["check"]): (c["result"], c["evidence"]) for t in report["tenants"] for c in t["checks"]}
    assert checks[("team-b", "sharing-mode")] == ("warn", "gpu-ts (NVIDIA-A100-SXM4-40GB-SHARED): time-slicing x4, "
                                                          "no memory or fault isolation, GPU-TS-0 shared with team-c")
    assert checks[("team-a", "driver-version")] == ("pass", "pool NVIDIA-H100-80GB-HBM3: driver 550.54.15")
    assert checks[("team-a", "mig-power")][0] == "pass" and report["errors"] == []


async def test_an_unreachable_prometheus_is_one_line_and_the_audit_falls_back(cluster, tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    report = await audit_json(tmp_path / "kubeconfig", "--prometheus", url)
    assert len(report["errors"]) == 1
    assert report["errors"][0].startswith(f"cannot read the agents' attribution from {url}: ClientConnectorError")
    team_b = {c["check"]: c for c in report["tenants"][1]["checks"]}
    assert team_b["sharing-mode"]["evidence"].endswith("no memory or fault isolation, shared with team-c")
