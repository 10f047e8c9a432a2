"""The wired agent streams its findings to a real broker: a new interference finding reaches a subscriber."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mqtt_broker import PREFIX, on_topic

from watchdog.kube.client import KubeApi
from watchdog.service.agent import Agent
from watchdog.testbed.world import SimulatedWorld

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "interference-timeslice-a100.yaml"


async def test_agent_publishes_findings_and_status(broker, subscribe, tmp_path):
    subscriber = await subscribe()
    async with SimulatedWorld(SCENARIO, workdir=tmp_path / "world") as world:
        settings = world.settings(
            mqtt={"enabled": True, "host": "127.0.0.1", "port": broker.port, "topic_prefix": PREFIX},
            sampling={"events": False},
        )
        kube = KubeApi.from_url(world.api.url)
        agent = Agent(settings, nvml=world.nvml, clock=world.clock, kube=kube)
        await agent.start()
        tasks = [asyncio.create_task(agent.mqtt.run()), asyncio.create_task(agent.pod_watcher.run()),
                 asyncio.create_task(agent.kubelet.refresher(world.clock, poll_seconds=0.01))]
        try:
            node = world.scenario.node
            _, status = await subscriber.next(on_topic(f"{PREFIX}/{node}/status"))
            assert status["node"] == node
            for _ in range(160):
                await agent.cycle_once()
                world.advance(world.scenario.tick_seconds)
                await asyncio.sleep(0)
            _, event = await subscriber.next(on_topic(f"{PREFIX}/{node}/findings/interference"))
            assert event["event"] == "new" and event["kind"] == "interference"
            assert (event["culprit"]["namespace"], event["culprit"]["name"]) == ("batch", "hog")
            assert [(v["namespace"], v["name"]) for v in event["victims"]] == [("prod", "serve")]
            snapshot = (await agent.cycle_once()).snapshot  # the exporter sees the stream's own counters
            assert snapshot.mqtt["published"] >= 2 and snapshot.mqtt["connected"] == 1
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await agent.stop()
            await kube.close()
