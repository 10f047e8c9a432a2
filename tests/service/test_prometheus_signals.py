"""Tenant victim signals from a real Prometheus (Debian's 2.42): values per pod, failures counted, values age out."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from tests.prometheus_server import free_port, serving_metrics
from tests.prometheus_server import prometheus as real_prometheus
from tests.waiting import poll
from watchdog.config import DetectionPolicy, Policy, SignalsSettings
from watchdog.config.runtime import RuntimePolicy
from watchdog.service.prometheus_signals import PrometheusSignals, parse_vector
from watchdog.testbed import SimClock

POLICY = DetectionPolicy.model_validate(
    {"victim_signal_overrides": {"prod": {"query": "app_p99_latency_seconds", "threshold": 0.5}}}
)
RUNTIME = RuntimePolicy.resolve(Policy(detection=POLICY))



@pytest.fixture
async def prometheus(tmp_path):
    """A real Prometheus scraping a tiny app every second; yields (url, set_latency)."""
    latency = {"value": 0.2}

    def body() -> str:
        return (
            "# TYPE app_p99_latency_seconds gauge\n"
            f'app_p99_latency_seconds{{namespace="prod",pod="serve"}} {latency["value"]}\n'
            'app_p99_latency_seconds{namespace="prod"} 9\n'  # no pod label: not attributable, skipped
            'app_p99_latency_seconds{namespace="other",pod="x"} 7\n'  # another tenant's pod: never prod's signal
        )

    async with serving_metrics(body) as target_port:
        with real_prometheus(tmp_path, target_port=target_port, job="app") as url:
            yield url, lambda value: latency.__setitem__("value", value)


async def test_values_per_pod_from_a_real_prometheus(prometheus):
    url, _ = prometheus
    clock = SimClock(100.0)
    signals = PrometheusSignals(SignalsSettings(prometheus_url=url), runtime=RUNTIME, clock=clock)
    async with aiohttp.ClientSession() as session:

        async def scraped() -> bool:
            await signals.refresh(session)
            return "prod/serve" in signals.values()

        # Bounded: Prometheus starts, then scrapes once a second.
        await poll(scraped, what=lambda: f"a value from Prometheus; errors {dict(signals.errors)}", timeout=30.0,
                   every=0.2)
    assert signals.values() == {"prod/serve": 0.2} and signals.errors["foreign_series"] >= 1
    clock.advance(61)  # older than stale_seconds: detection gets no value rather than an old one
    assert signals.values() == {}


async def test_unreachable_prometheus_is_counted_and_gives_no_values():
    signals = PrometheusSignals(SignalsSettings(prometheus_url=f"http://127.0.0.1:{free_port()}", timeout_seconds=2),
                                runtime=RUNTIME, clock=lambda: 0.0)
    async with aiohttp.ClientSession() as session:
        await signals.refresh(session)
    assert signals.values() == {} and sum(signals.errors.values()) == 1


def test_parse_vector_rejects_errors_and_skips_unlabelled_series():
    with pytest.raises(ValueError, match="bad_data"):
        parse_vector({"status": "error", "errorType": "bad_data", "error": "parse error"})
    with pytest.raises(ValueError, match="vector"):
        parse_vector({"status": "success", "data": {"resultType": "matrix", "result": []}})
    body = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"namespace": "a", "pod": "p"}, "value": [1, "0.5"]},
        {"metric": {"namespace": "a"}, "value": [1, "7"]},
        {"metric": {"namespace": "a", "pod": "q"}, "value": [1, "NaN"]},
    ]}}
    assert parse_vector(body) == {"a/p": 0.5}


async def test_agent_feeds_detection_and_counts_failures(drive):
    from tests.service.conftest import SCENARIOS

    driver = await drive(SCENARIOS / "demo.yaml", events=False,
                         signals={"prometheus_url": f"http://127.0.0.1:{free_port()}", "timeout_seconds": 2},
                         policy={"detection": {"victim_signal_overrides": {"ml-prod": {"query": "up"}}}})
    agent = driver.agent
    assert agent.cycle.signals is agent.signals
    async with aiohttp.ClientSession() as session:
        await agent.signals.refresh(session)
    snapshot = await driver.ticks(1)
    assert snapshot.sample is not None and snapshot.attribution.healthy  # the cycle goes on
    assert sum(n for (stage, _), n in snapshot.errors.items() if stage == "signals") == 1


@pytest.mark.parametrize("body", [None, [], "502 Bad Gateway", {"status": "success", "data": []},
                                  {"status": "success", "data": {"resultType": "vector", "result": ["x", 3]}}])
def test_malformed_answers_are_errors_not_crashes(body):
    try:
        assert parse_vector(body) == {}  # only the list of non-object series parses, to nothing
    except ValueError:
        pass  # the refresh counts it; anything else would escape and stop the agent


async def test_the_refresher_survives_an_unexpected_error():
    class Broken(PrometheusSignals):
        async def refresh(self, session):
            raise AttributeError("a bug")

    rounds = []

    async def sleep(seconds):
        rounds.append(seconds)
        if len(rounds) == 2:
            raise asyncio.CancelledError

    signals = Broken(SignalsSettings(prometheus_url="http://127.0.0.1:1"), runtime=RUNTIME,
                     clock=lambda: 0.0, sleep=sleep)
    with pytest.raises(asyncio.CancelledError):
        await signals.run()
    assert signals.errors["attributeerror"] == 2 and len(rounds) == 2
