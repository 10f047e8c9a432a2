"""Trace size on disk and replay cost per tick on the dense MIG node (8 × H100, 56 instances, a pod each).

Issue targets: ≤ 4 KB per tick on disk (≤ 350 MB per node per day at 1 Hz) and replay ≤ 5 ms per tick (a day of
one node in ≤ 8 minutes). The trace is recorded from the simulated node through the real sampler and the real
attribution join, with pods as the pod watch keeps them (labels, annotations, containers, owner, QoS), then
written as version 1 (every field, every line) and version 2 (compact, attribution when it changes), plain and
gzip. Replay is split into its stages on the version-2 trace: read (file + gzip), parse (JSON text → data),
validate (the schema), decode (data → NodeSample/Attribution), detect (the detector), decide (the eviction rules
and pacer), and compared with the end-to-end ``replay()``. Parsers (json, orjson, msgspec untyped) and validators
(jsonschema, fastjsonschema) are measured side by side on the same lines.

Run: ``.venv/bin/python bench/bench_trace.py [--ticks 600]``. A script, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path
from types import MappingProxyType

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_sampling import dense_scenario  # noqa: E402

from watchdog.action import Pacer, effective_policy, plan  # noqa: E402
from watchdog.attribution.join import attribute  # noqa: E402
from watchdog.config import Policy  # noqa: E402
from watchdog.detection import Detector  # noqa: E402
from watchdog.evaluation.replay import replay  # noqa: E402
from watchdog.model import ContainerInfo, DeviceAssignment, PodIndex, PodInfo  # noqa: E402
from watchdog.sampling import NvmlSampler  # noqa: E402
from watchdog.testbed import SimClock, SimulatedGpuNode  # noqa: E402
from watchdog.trace import TraceHeader, TraceWriter, decode_tick  # noqa: E402
from watchdog.trace import parsing  # noqa: E402


def pod_info(pod) -> PodInfo:
    """A pod as the watch-fed cache holds it: the fields a real Deployment's pod carries."""
    return PodInfo(uid=pod.uid, namespace=pod.namespace, name=pod.name, node="bench", priority=pod.priority,
                   priority_class="batch-low", qos_class="Burstable", owner_kind="ReplicaSet", created=1.7e9,
                   labels=MappingProxyType({"app": pod.name.rsplit("-", 1)[0], "pod-template-hash": "5d8f7c9b6d",
                                            "team": pod.namespace}),
                   annotations=MappingProxyType({"kubectl.kubernetes.io/default-container": "main"}),
                   containers=(ContainerInfo("main", f"containerd://{pod.uid.replace('-', '') * 2}"),),
                   gpu_resources=("nvidia.com/mig-1g.10gb",))


WRITE_SECONDS: dict[str, float] = {}  # per trace kind: time spent in TraceWriter.write (the agent pays it per tick)


def record(directory: Path, ticks: int) -> dict[str, Path]:
    clock = SimClock()
    node = SimulatedGpuNode.from_scenario(dense_scenario(8), clock)
    sampler = NvmlSampler(node.nvml, node="bench", clock=clock)
    sampler.open()
    index = PodIndex.of(pod_info(p) for p in node.scenario.pods)
    paths = {f"v{v}{ext}": directory / f"bench-v{v}.jsonl{ext}" for v in (1, 2) for ext in ("", ".gz")}
    writers = [TraceWriter(path, header=TraceHeader(node="bench", tick_seconds=1.0, started=clock.now(),
                                                    version=int(key[1]))) for key, path in paths.items()]
    for tick in range(ticks):
        node.state()
        assignments = [DeviceAssignment(device_id=row.device_id, resource=row.resource, namespace=row.namespace,
                                        pod=row.pod, container=row.container) for row in node.assignments()]
        proc = {p.pid: (p.pod_uid, "main") for p in node.processes()}
        sample = sampler.sample(tick)
        attribution = attribute(sample, assignments=assignments, index=index, proc=proc, kubelet_ok=True, api_ok=True)
        for key, writer in zip(paths, writers):
            started = time.perf_counter()
            writer.write(sample, attribution)
            WRITE_SECONDS[key] = WRITE_SECONDS.get(key, 0.0) + time.perf_counter() - started
        clock.advance(1.0)
    for writer in writers:
        writer.close()
    sampler.close()
    node.close()
    return paths


def stages(path: Path, policy: Policy) -> dict[str, float]:
    """Milliseconds per tick of each replay stage, run by hand in replay's order."""
    spent = dict.fromkeys(("read", "parse", "validate", "decode", "detect", "decide"), 0.0)
    action = effective_policy(policy.action, own_namespace="gpu-watchdog", tenant_label=None)
    detector, pacer = Detector(policy.detection), Pacer(action)
    validate = parsing._compiled("tick")
    count, held = 0, None
    t = time.perf_counter()
    with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as stream:
        lines = stream.read().splitlines()[1:]
    spent["read"] = time.perf_counter() - t  # the whole file; per tick below
    for raw in lines:
        t0 = time.perf_counter()
        data = parsing.msgspec.json.decode(raw)
        t1 = time.perf_counter()
        validate(data)
        t2 = time.perf_counter()
        if "attribution_from" in data:
            sample, _ = decode_tick({**data, "attribution": {}}, node="bench")
            attribution = held
        else:
            sample, attribution = decode_tick(data, node="bench")
            held = attribution
        t3 = time.perf_counter()
        findings = tuple(detector.step(sample, attribution.with_tenant_label(None)))
        t4 = time.perf_counter()
        plan(findings, attribution, action, sample.timestamp, pacer=pacer)
        t5 = time.perf_counter()
        for name, seconds in zip(("parse", "validate", "decode", "detect", "decide"),
                                 (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            spent[name] += seconds
        count += 1
    return {name: 1e3 * seconds / count for name, seconds in spent.items()}  # count: one per tick line


def alternatives(path: Path) -> dict[str, float]:
    """ms per line of each parser and validator on the same (version-1, full) lines."""
    import jsonschema
    import msgspec
    import orjson

    lines = path.read_bytes().splitlines()[1:]
    decoded = [json.loads(line) for line in lines]
    slow = parsing._validator("tick")
    out = {}
    for name, call, items in (
        ("parse json", json.loads, lines), ("parse orjson", orjson.loads, lines),
        ("parse msgspec", msgspec.json.decode, lines),
        ("validate jsonschema", lambda d: jsonschema.exceptions.best_match(slow.iter_errors(d)), decoded[:100]),
        ("validate fastjsonschema", parsing._compiled("tick"), decoded),
    ):
        t = time.perf_counter()
        for item in items:
            call(item)
        out[name] = 1e3 * (time.perf_counter() - t) / len(items)
    return out


def timed(path: Path, policy: Policy, repeat: int) -> float:
    """Milliseconds of the least disturbed of ``repeat`` whole replays."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        replay(path, policy=policy)
        best = min(best, time.perf_counter() - started)
    return 1e3 * best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=600)
    parser.add_argument("--repeat", type=int, default=3, help="replays per measure; the least disturbed is shown")
    args = parser.parse_args(argv)
    policy = Policy()
    with tempfile.TemporaryDirectory() as tmp:
        paths = record(Path(tmp), args.ticks)
        print(f"56 MIG instances, {args.ticks} ticks: bytes per tick on disk (a day at 1 Hz)")
        for key, path in paths.items():
            size = path.stat().st_size / args.ticks
            print(f"  {key:6} {size:>9.0f} B/tick  {size * 86400 / 1e6:>8.0f} MB/day  "
                  f"write {1e3 * WRITE_SECONDS[key] / args.ticks:.3f} ms/tick")
        print("replay of bench-v2.jsonl.gz, ms per tick by stage:")
        runs = [stages(paths["v2.gz"], policy) for _ in range(args.repeat)]
        split = {name: min(run[name] for run in runs) for name in runs[0]}  # the machine is shared
        for name, ms in split.items():
            print(f"  {name:9} {ms:7.3f}")
        print(f"  {'sum':9} {sum(split.values()):7.3f}")
        for key in ("v1", "v2.gz"):
            print(f"replay() end to end, {key:6}: {timed(paths[key], policy, args.repeat) / args.ticks:7.3f} ms/tick")
        # What replay did before: every line through json + jsonschema (100 lines are enough to see it).
        short = Path(tmp) / "short-v1.jsonl"
        short.write_bytes(b"".join(paths["v1"].read_bytes().splitlines(keepends=True)[:101]))
        parsing.FAST = False
        print(f"replay() end to end, v1 on the precise path only (json + jsonschema, as before): "
              f"{timed(short, policy, 1) / 100:7.3f} ms/tick")
        parsing.FAST = True
        print("parsers and validators on the version-1 lines, ms per line:")
        for name, ms in alternatives(paths["v1"]).items():
            print(f"  {name:24} {ms:7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
