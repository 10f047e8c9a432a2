"""The agent's own resident memory on a dense MIG node (8 H100 × 7 instances = 56), apart from the simulated world.

On a real node the agent's process holds only the agent: the driver is the NVIDIA library, the cluster is elsewhere.
Here the simulated GPU node, the fake API server and the fake kubelet live in the same process, so their share is
measured and taken out. Four fresh processes, each reporting its resident set (VmRSS) at the end:

1. the agent's modules imported (what the DaemonSet's process imports);
2. the same plus the test bed's modules: the difference is code the agent never loads;
3. the same with the simulated world started and moved through the ticks, no agent: the world's own memory;
4. the same with the production Agent running those ticks against the world (pod watch, kubelet refresher,
   sampling, attribution, detection, pacing, /metrics rendered each tick).

The agent's own RSS = (4) − [(3) − (2)] − [(2) − (1)]: everything in (4) except the world's state and the test bed's
code. The packages only the test extras install (TEST_ONLY) are kept out of every process, as they are out of the
agent's image. The DaemonSet's memory limit is 256 Mi (deploy/helm/gpu-watchdog/values.yaml).

Run: ``.venv/bin/python bench/bench_rss.py [--ticks 300]``. A script, not a test.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import asyncio, json, sys, tempfile
sys.path.insert(0, {root!r}); sys.path.insert(0, {bench!r})
stage, ticks = {stage}, {ticks}
for absent in {test_only!r}:  # installed here by the test extras only; optional imports of the agent's libraries
    sys.modules[absent] = None

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

import watchdog.cli, watchdog.service.agent  # noqa: F401  (the agent's own modules)
if stage >= 2:
    from bench_sampling import dense_scenario
    from watchdog.testbed.world import SimulatedWorld
    from watchdog.publishing import render

async def main():
    if stage < 3:
        return
    with tempfile.TemporaryDirectory() as workdir:
        world = SimulatedWorld(dense_scenario(8), workdir=workdir)
        await world.start()
        agent = None
        try:
            if stage == 4:
                from watchdog.kube.client import KubeApi
                from watchdog.service.agent import Agent
                kube = KubeApi.from_url(world.api.url)
                settings = world.settings(sampling={{"events": False}}, publishing={{"port": 0}})
                agent = Agent(settings, nvml=world.nvml, clock=world.clock, kube=kube)
                await agent.start()
                tasks = [asyncio.create_task(agent.kubelet.refresher(world.clock, poll_seconds=0.01)),
                         asyncio.create_task(agent.pod_watcher.run())]
            for _ in range(ticks):
                if agent is not None:
                    await agent.cycle_once()
                    render(agent.cycle.snapshot)
                else:
                    world.node.state()
                world.advance(1.0)
                await asyncio.sleep(0)
            if agent is not None:
                instances = sum(len(g.instances) for g in agent.cycle.snapshot.sample.gpus)
                assert instances == 56, instances
                for task in tasks:
                    task.cancel()
                await agent.stop()
                await kube.close()
        finally:
            await world.stop()

asyncio.run(main())
print(json.dumps({{"rss": rss()}}))
'''


# Packages the test extras install here that the agent's own libraries import when present (kubernetes.aio's
# dynamic client tries kubernetes_validate, grpc tries grpc_tools): absent from the agent's image (Dockerfile,
# `pip install .`), so each process measures without them.
TEST_ONLY = ("kubernetes_validate", "grpc_tools")


def measure(stage: int, ticks: int) -> int:
    code = CHILD.format(root=str(ROOT), bench=str(ROOT / "bench"), stage=stage, ticks=ticks, test_only=TEST_ONLY)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])["rss"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=300)
    args = parser.parse_args(argv)
    mib = 1 << 20
    agent_modules, with_testbed, world, everything = (measure(stage, args.ticks) for stage in (1, 2, 3, 4))
    own = everything - (world - with_testbed) - (with_testbed - agent_modules)
    print(f"agent modules imported:        {agent_modules / mib:7.1f} MiB")
    print(f"+ test bed modules:            {with_testbed / mib:7.1f} MiB")
    print(f"+ simulated world, {args.ticks} ticks:  {world / mib:7.1f} MiB")
    print(f"+ agent running those ticks:   {everything / mib:7.1f} MiB")
    print(f"agent's own RSS at 56 MIG instances: {own / mib:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
