"""What `gpu-watchdog whatif` costs the controller per node: the fan-out machinery alone, against instant agents.

Each agent's replay runs on its own node; what the controller pays is listing the pods, one POST and the GETs per
node, and folding the answers into one report. This bench starts N stand-in agents (testbed/cluster/whatif_agent.py:
the contract, answering at once, one ``running`` poll before ``done``, a result with a few differences) in another
process, lists them through a fake API server, and times ``find_targets`` + ``ask_all`` + ``build`` +
``format_fleet`` in this process: CPU time (user + system of this process) and wall time, per node.

Run: ``.venv/bin/python bench/bench_whatif_fanout.py [--nodes 50 200 1000] [--concurrency 16]``. A script, not a
test: it only checks that every node answered.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fleet.agents import TOKEN, add_agent_pod, result_pair  # noqa: E402
from watchdog.fleet.whatif import FanOut, ask_all, find_targets  # noqa: E402
from watchdog.fleet.whatif_report import build, format_fleet  # noqa: E402
from watchdog.kube.client import KubeApi  # noqa: E402
from watchdog.testbed.cluster.apiserver import FakeApiServer  # noqa: E402
from watchdog.testbed.cluster.whatif_agent import FakeWhatIfAgent  # noqa: E402


def serve_agents(count: int, ports: multiprocessing.Queue, stop: multiprocessing.Event) -> None:
    """The agents, in a process of their own so their CPU time is not the controller's."""

    async def main() -> None:
        agents = [FakeWhatIfAgent(node=f"gpu-{i:04d}", token=TOKEN, result=result_pair(shift=5), running_polls=1)
                  for i in range(count)]
        for agent in agents:
            await agent.start()
        ports.put([agent.port for agent in agents])
        while not stop.is_set():
            await asyncio.sleep(0.1)
        for agent in agents:
            await agent.stop()

    asyncio.run(main())


async def measure(ports: list[int], *, concurrency: int) -> tuple[float, float]:
    async with FakeApiServer() as server:
        for i, port in enumerate(ports):
            add_agent_pod(server, node=f"gpu-{i:04d}", port=port)
        async with KubeApi.from_url(server.url) as api:
            cpu, wall = time.process_time(), time.perf_counter()
            targets = await find_targets(api)
            outcomes = await ask_all(targets, FanOut(body={"policy": {}}, token=TOKEN, concurrency=concurrency,
                                                     poll_seconds=0.0))
            format_fleet(build(outcomes, policy="p.yaml", window={}), outcomes)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert all(outcome.state == "done" for outcome in outcomes), {o.state for o in outcomes}
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[50, 200, 1000])
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    print(f"{'nodes':>6} {'cpu ms/node':>12} {'wall ms/node':>13} {'wall s':>8}")
    for count in args.nodes:
        ports: multiprocessing.Queue = multiprocessing.Queue()
        stop = multiprocessing.Event()
        child = multiprocessing.Process(target=serve_agents, args=(count, ports, stop))
        child.start()
        try:
            cpu, wall = asyncio.run(measure(ports.get(timeout=120), concurrency=args.concurrency))
        finally:
            stop.set()
            child.join(30)
        print(f"{count:>6} {1000 * cpu / count:>12.2f} {1000 * wall / count:>13.2f} {wall:>8.2f}")


if __name__ == "__main__":
    main()
