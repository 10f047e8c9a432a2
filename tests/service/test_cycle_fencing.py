"""The cycle's fences: a hung NVML call fails its cycle without stacking a second one; settings reach the stages."""

from __future__ import annotations

import asyncio
import threading

from tests.service.conftest import SCENARIOS


class HangingSampler:
    """The real sampler, except that its next sample() blocks until released (a GPU stuck in a driver call)."""

    def __init__(self, sampler) -> None:
        self.sampler = sampler
        self.release = threading.Event()
        self.calls = 0

    def sample(self, tick):
        self.calls += 1
        self.release.wait(timeout=30)
        return self.sampler.sample(tick)

    def error_counts(self):
        return self.sampler.error_counts()


async def test_a_hung_sample_fails_its_cycle_and_blocks_no_other(drive):
    driver = await drive(SCENARIOS / "demo.yaml", events=False)
    cycle = driver.agent.cycle
    hanging = HangingSampler(cycle.sampler)
    cycle.sampler, cycle.sample_timeout = hanging, 0.05
    snapshot = await driver.ticks(1)
    stages = {s.name: s for s in snapshot.stages}
    assert not stages["sampling"].success and "took over" in stages["sampling"].detail
    snapshot = await driver.ticks(1)
    stages = {s.name: s for s in snapshot.stages}
    assert "still running" in stages["sampling"].detail and hanging.calls == 1  # never a second call on top
    assert snapshot.errors[("sampling", "timeout")] == 1 and snapshot.errors[("sampling", "still_running")] == 1
    hanging.release.set()
    while cycle._sampling is not None and not cycle._sampling.done():
        await asyncio.sleep(0.01)  # bounded by the release above: the worker thread finishes its call
    snapshot = await driver.ticks(1)
    assert {s.name: s.success for s in snapshot.stages}["sampling"] and snapshot.sample is not None


async def test_settings_reach_the_stages(drive):
    driver = await drive(SCENARIOS / "demo.yaml", events=False,
                         attribution={"refresh_seconds": 7.0, "kubelet_timeout_seconds": 3.0,
                                      "backoff_max_seconds": 9.0},
                         kube={"watch_timeout_seconds": 33, "watch_backoff_max_seconds": 4.0,
                               "watch_idle_seconds": 45.0},
                         sampling={"sample_timeout_seconds": 2.5})
    agent = driver.agent
    assert agent.kubelet._refresh_seconds == 7.0 and agent.kubelet._backoff_max == 9.0
    assert agent.kubelet._client.timeout == 3.0
    assert agent.pod_watcher.watch_timeout_seconds == 33 and agent.pod_watcher.backoff_max == 4.0
    assert agent.pod_watcher.watch_idle_seconds == 45.0
    assert agent.cycle.sample_timeout == 2.5


async def test_one_runtime_policy_reaches_every_stage_and_so_does_a_reload(drive):
    """The tenant label is resolved once per policy load and the same object reaches detection, action, the
    victim-signal client and the metrics; a reload that changes the label changes it for all of them."""
    from watchdog.config import Policy
    from watchdog.publishing import render

    driver = await drive(SCENARIOS / "demo.yaml", events=False, policy={"action": {"tenant_label": "team"}},
                         signals={"prometheus_url": "http://127.0.0.1:9"})
    agent = driver.agent
    consumers = (agent.cycle.runtime, agent.signals.runtime)
    assert all(runtime is agent.runtime for runtime in consumers)
    assert agent.action.policy.tenant_label == agent.runtime.tenant_label == "team"
    snapshot = await driver.ticks(2)
    sweep = next(p for p in snapshot.attribution.pods.values() if p.name == "sweep-7")
    assert snapshot.attribution.index.tenant_of(sweep.ref) == "research"  # what detection counts tenants by
    assert 'pod="sweep-7",tenant="research"' in render(snapshot).decode()

    agent.apply_policy(Policy.model_validate({"action": {"tenant_label": "app"}}))
    assert all(runtime is agent.runtime for runtime in (agent.cycle.runtime, agent.signals.runtime))
    assert agent.action.policy.tenant_label == agent.runtime.tenant_label == "app"
    snapshot = await driver.ticks(1)
    assert snapshot.attribution.index.tenant_of(sweep.ref) == "sweep"
    assert snapshot.attribution.index.tenant_label == "app"  # the one carrier publishing reads
    body = render(snapshot).decode()
    assert 'pod="sweep-7",tenant="sweep"' in body and 'tenant="research"' not in body
    assert "gpu-watchdog" in agent.action.policy.protected_namespaces  # the reload kept the runtime overlay


class Exploding:
    """A finding source that raises on every tick."""

    name = "exploding"
    needs = frozenset()

    def __init__(self, policy, *, tenant_of) -> None:
        pass

    def set_policy(self, policy) -> None:
        pass

    def step(self, view):
        raise RuntimeError("broken source")


async def test_a_failing_finding_source_is_counted_as_its_own_stage_and_costs_only_its_findings(drive):
    from watchdog.detection import SOURCES, Detector

    driver = await drive(SCENARIOS / "demo.yaml", events=False)
    driver.agent.cycle.detector = Detector(driver.agent.runtime.detection, sources=(Exploding, *SOURCES))
    plain = Detector(driver.agent.runtime.detection)  # the same ticks, without the broken source
    for _ in range(60):
        snapshot = await driver.ticks(1)
        expected = plain.step(snapshot.sample, snapshot.attribution)
        assert [f.key for f in snapshot.findings] == [f.key for f in expected]
    assert snapshot.findings  # the demo has open findings by now: the other sources kept theirs
    assert snapshot.errors[("detection/exploding", "runtimeerror")] == 60
    detection = {s.name: s for s in snapshot.stages}["detection"]
    assert not detection.success and detection.detail == "failed: exploding"
