"""Per-MIG-instance activity borrowed from dcgm-exporter's series in a real Prometheus (Debian's): it reaches
detection for the right MIG devices of an A100 (no GPM), and a bad, empty or unlabelled answer is counted, never
a crash and never a guess."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web

from tests.prometheus_server import serving, serving_metrics
from tests.prometheus_server import prometheus as real_prometheus
from tests.service.conftest import SCENARIOS
from tests.waiting import poll
from watchdog.config import SignalsSettings
from watchdog.detection.borrowed import with_borrowed
from watchdog.detection.domains import devices_of
from watchdog.model import InstanceActivity
from watchdog.service.borrowed_activity import BorrowedActivity, needs_borrowing

ACTIVITY = {  # GI id → (profile, ns, pod, SM, DRAM, GR engine), as in scenarios/interference-power-a100-mig.yaml
    1: ("4g.20gb", "batch", "sweep", 0.83, 0.61, 0.9),
    5: ("2g.10gb", "research", "notebook", 0.4, 0.2, 0.45),
    13: ("1g.5gb", "prod", "infer", 0.47, 0.3, 0.5),
}
METRICS = ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")


def series(metric: str, value: float, *, uuid: str, node: str, profile: str | None, gi: int | None,
           namespace: str = "", pod: str = "") -> str:
    """One line in dcgm-exporter's label set and order for a MIG device (GPU_I_* only in MIG mode)."""
    labels = [("gpu", "0"), ("UUID", uuid), ("device", "nvidia0"), ("modelName", "NVIDIA A100-SXM4-40GB")]
    if profile is not None and gi is not None:
        labels += [("GPU_I_PROFILE", profile), ("GPU_I_ID", str(gi))]
    labels += [("Hostname", node), ("DCGM_FI_DRIVER_VERSION", "580.82.07"), ("container", "main" if pod else ""),
               ("namespace", namespace), ("pod", pod)]
    return metric + "{" + ",".join(f'{name}="{text}"' for name, text in labels) + "} " + str(value)


def exposition(uuid: str, node: str) -> str:
    lines = []
    for position, metric in enumerate(METRICS):
        lines.append(f"# TYPE {metric} gauge")
        for gi, (profile, ns, pod, *values) in ACTIVITY.items():
            lines.append(series(metric, values[position], uuid=uuid, node=node, profile=profile, gi=gi,
                                namespace=ns, pod=pod))
        lines.append(series(metric, 0.99, uuid="GPU-of-another-node", node="n2", profile="7g.40gb", gi=0))
    # The same GPU without a GPU instance id: whose instance is it? Counted, never guessed.
    lines.append(series(METRICS[0], 0.7, uuid=uuid, node=node, profile=None, gi=None))
    return "\n".join(lines) + "\n"


@pytest.fixture
async def dcgm_prometheus(tmp_path):
    """A real Prometheus scraping a dcgm-exporter look-alike; yields (url, target) where target["uuid"] is the GPU
    the exporter reports on (set by the test once the simulated node is up)."""
    target = {"uuid": "", "node": "sim-node-1"}

    def body() -> str:
        return exposition(target["uuid"], target["node"]) if target["uuid"] else ""

    async with serving_metrics(body) as target_port:
        with real_prometheus(tmp_path, target_port=target_port, job="dcgm-exporter") as url:
            yield url, target


async def test_dcgm_activity_reaches_detection_for_the_right_mig_devices(drive, dcgm_prometheus):
    url, target = dcgm_prometheus
    driver = await drive(SCENARIOS / "interference-power-a100-mig.yaml", events=False,
                         signals={"prometheus_url": url, "timeout_seconds": 2,
                                  "borrowed_activity": {"enabled": True}})
    agent = driver.agent
    assert agent.cycle.activity is agent.activity
    first = await agent.cycle_once()
    [gpu] = first.sample.gpus
    assert gpu.mig_enabled and all(mig.sm_util is None for mig in gpu.instances)  # an A100: no GPM
    assert agent.activity.wanted() == {gpu.uuid}
    target["uuid"] = gpu.uuid
    expected = {f"{gpu.uuid}/{gi}": InstanceActivity(sm=sm, dram=dram, graphics=gr)
                for gi, (_, _, _, sm, dram, gr) in ACTIVITY.items()}
    async with aiohttp.ClientSession() as session:

        async def refreshed() -> bool:
            # Every signal of every instance: Prometheus may first scrape the target between two of the queries.
            await agent.activity.refresh(session)
            return agent.activity.values() == expected

        # Bounded: Prometheus starts, then scrapes once a second.
        await poll(refreshed, what="dcgm-exporter series through Prometheus", timeout=30.0, every=0.2)
    result = await agent.cycle_once()
    assert dict(result.activity) == expected  # the other node's GPU is not ours
    assert agent.activity.errors["unlabelled"] >= 1  # the series without GPU_I_ID was counted, not placed
    filled, borrowed_into = with_borrowed(result.sample, result.activity)
    assert borrowed_into == {mig.uuid for mig in gpu.instances}
    pod_sm = {device.mig.gpu_instance: dict(device.pod_sm)
              for device in devices_of(filled, result.attribution) if device.mig is not None}
    assert pod_sm == {gi: {f"{ns}/{pod}": sm} for gi, (_, ns, pod, sm, _, _) in ACTIVITY.items()}


@pytest.fixture
async def bad_prometheus():
    """An HTTP server answering /api/v1/query with one malformed body after another."""
    bodies = iter(["502 Bad Gateway", '{"status": "error", "errorType": "bad_data", "error": "parse error"}',
                   '{"status": "success", "data": {"resultType": "matrix", "result": []}}',
                   '{"status": "success", "data": {"resultType": "vector", "result": []}}',
                   '{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"UUID": '
                   '"GPU-a", "GPU_I_ID": "1"}, "value": [1, "75"]}]}}'] + ["[]"] * 10)

    async def query(_request):
        return web.Response(text=next(bodies), content_type="application/json")

    async with serving({"/api/v1/query": query}) as port:
        yield f"http://127.0.0.1:{port}"


async def test_malformed_and_empty_answers_are_counted_and_give_no_activity(bad_prometheus):
    settings = SignalsSettings(prometheus_url=bad_prometheus, borrowed_activity={"enabled": True})
    borrowed = BorrowedActivity(settings, wanted=lambda: frozenset({"GPU-a"}), clock=lambda: 0.0)
    async with aiohttp.ClientSession() as session:
        await borrowed.refresh(session)  # sm: 502 page; dram: error status; graphics: a matrix
        await borrowed.refresh(session)  # sm: no series; dram: a percentage; graphics: a JSON list
    assert borrowed.values() == {}
    assert borrowed.errors == {"jsondecodeerror": 1, "valueerror": 3, "empty": 2, "out_of_range": 1}


async def test_nothing_is_asked_when_nvml_has_every_reading():
    borrowed = BorrowedActivity(SignalsSettings(prometheus_url="http://127.0.0.1:1"),
                                wanted=lambda: needs_borrowing(None), clock=lambda: 0.0)
    async with aiohttp.ClientSession() as session:
        await borrowed.refresh(session)
    assert borrowed.queries == 0 and not borrowed.errors
