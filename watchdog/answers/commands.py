"""The `explain`, `inventory` and `bundle` subcommands: their flags and their output, registered by watchdog.cli.

They live beside what they print rather than in cli.py so the command line stays a table of contents; a failure a
user can fix (no such pod, no cluster, no NVML) raises, and watchdog.cli_errors words it (one line, exit 2).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any


def _pod_name(text: str) -> tuple[str, str]:
    namespace, slash, name = text.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/POD, got {text!r}")
    return namespace, name


async def _explain(args: argparse.Namespace) -> dict[str, Any] | str:
    from watchdog.answers.explain import as_json, explain, render_text
    from watchdog.kube import connect

    async with await connect(args.kubeconfig, context=args.context) as api:
        namespace, name = args.pod
        explanation = await explain(api, namespace=namespace, name=name, agent_url=args.agent_url,
                                    agent_namespace=args.agent_namespace, agent_port=args.agent_port)
    return as_json(explanation) if args.json else render_text(explanation)


def cmd_explain(args: argparse.Namespace) -> int:
    answer = asyncio.run(_explain(args))
    if isinstance(answer, str):
        sys.stdout.write(answer)
    else:
        json.dump(answer, sys.stdout, indent=2)
        print()
    return 0


def cmd_inventory(args: argparse.Namespace) -> int:
    from watchdog.answers.inventory import format_table, read_inventory

    inventory = asyncio.run(read_inventory(
        agent_url=args.agent_url, simulate=args.simulate, kubeconfig=args.kubeconfig, context=args.context,
        node=args.node, namespace=args.agent_namespace, port=args.agent_port))
    if args.json:
        json.dump(inventory.document, sys.stdout, indent=2)
        print()
    else:
        sys.stdout.write(format_table(inventory))
    return 0


def cmd_bundle(args: argparse.Namespace) -> int:
    from watchdog.answers.bundle import BundleRequest, write_bundle

    request = BundleRequest(out=args.out, config=args.config, policy=args.policy, agent_url=args.agent_url,
                            logs=tuple(args.log or ()), record_seconds=args.record_seconds, simulate=args.simulate)
    try:
        out, staging = write_bundle(request)
    except KeyboardInterrupt:
        print("gpu-watchdog bundle: interrupted; nothing written", file=sys.stderr)
        return 130
    notes = f"; {len(staging.notes)} note(s) in NOTES.txt" if staging.notes else ""
    print(f"gpu-watchdog bundle: wrote {out} ({len(staging.entries) + 1} files{notes}); attach it to the bug report")
    return 0


BUNDLE_CONTENTS = (
    "It contains: the NVML probe (table and JSON), the newest flight-recorder segments (at most 50 MiB) or else a "
    "fresh recording in observe mode, one /metrics scrape of the running agent, the effective settings and policy "
    "with every secret redacted (files holding secrets are named, never read), versions (gpu-watchdog, Python, "
    "nvidia-ml-py, driver, kernel, OS), the --log files and MANIFEST.txt. A part it cannot get becomes a line of "
    "NOTES.txt.\n\n"
    "The agent logs to stderr only: add its log with `kubectl logs -n gpu-watchdog <agent pod> > agent.log` and "
    "--log agent.log. In the agent's container (read-only root filesystem) point TMPDIR and --out at a writable "
    "volume.")


def _agent_flags(parser: argparse.ArgumentParser, *, url_help: str) -> Any:
    """--agent-url (in a group the caller may add alternatives to), --agent-namespace, --agent-port."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--agent-url", help=url_help)
    parser.add_argument("--agent-namespace", default="gpu-watchdog", help="namespace of the agent DaemonSet")
    parser.add_argument("--agent-port", type=int, help="the agent's API port (default: the agent pod's container "
                        "port named metrics, else 9435)")
    return source


def register(sub: Any) -> None:
    """Add `explain`, `inventory` and `bundle` to the `gpu-watchdog` subcommands."""
    explain = sub.add_parser(
        "explain", help="why gpu-watchdog flagged, spared or evicted a pod, in words",
        description="Why gpu-watchdog flagged, spared or evicted a pod, in words: its node, GPU requests and devices, "
                    "the findings naming it, every decision about it and its Events. Reads the cluster with the "
                    "kubeconfig kubectl would use and asks the pod's node agent; it only reads.",
        examples=["gpu-watchdog explain team-a/trainer-0", "gpu-watchdog explain team-a/trainer-0 --json"])
    explain.add_argument("pod", type=_pod_name, metavar="NAMESPACE/POD", help="the pod to explain")
    explain.add_argument("--kubeconfig", help="kubeconfig (default $KUBECONFIG, ~/.kube/config, else in-cluster)")
    explain.add_argument("--context", help="kubeconfig context")
    _agent_flags(explain, url_help="the node agent's base URL (default: the agent DaemonSet's pod on the pod's "
                 "node, at its pod IP and `metrics` container port)")
    explain.add_argument("--json", action="store_true", help="print the gathered facts as JSON")
    explain.set_defaults(func=cmd_explain)

    inventory = sub.add_parser(
        "inventory", help="a node's GPUs, MIG layout and who holds each device, asked of its agent",
        description="A node's GPUs and MIG layout (GPU and compute instances, profile, UUID, memory, processes) and "
                    "the pod holding each device, as the node's agent last saw them. The agent is found as its "
                    "DaemonSet's pod with the kubeconfig kubectl would use (--node picks one of several), or named "
                    "with --agent-url; with neither, this machine's NVML is read (holders unknown).",
        examples=["gpu-watchdog inventory", "gpu-watchdog inventory --node gpu-node-7 --json",
                  "gpu-watchdog inventory --agent-url http://10.0.3.7:9435",
                  "gpu-watchdog inventory --simulate scenarios/demo.yaml"])
    inventory.add_argument("--node", help="the node whose agent to ask (default: the only agent, else this host's)")
    inventory.add_argument("--kubeconfig", help="kubeconfig (default $KUBECONFIG, ~/.kube/config, else in-cluster)")
    inventory.add_argument("--context", help="kubeconfig context")
    source = _agent_flags(inventory, url_help="ask this agent (e.g. http://127.0.0.1:9435) instead of finding it")
    source.add_argument("--simulate", metavar="SCENARIO", help="a fresh simulated node instead of an agent (holders "
                        "unknown)")
    inventory.add_argument("--json", action="store_true", help="the agent's DeviceList document (docs/api.md) "
                           "instead of a table")
    inventory.set_defaults(func=cmd_inventory)

    bundle = sub.add_parser(
        "bundle", help="one tar.gz to attach to a bug report: probe, traces, metrics, settings",
        description="Gather what a bug report from this node needs into one archive, secrets redacted; a part it "
                    "cannot get is noted inside, never an error.",
        epilog=BUNDLE_CONTENTS,
        examples=["gpu-watchdog bundle --out bundle.tar.gz",
                  "gpu-watchdog bundle --config /etc/gpu-watchdog/settings/settings.yaml --policy "
                  "/etc/gpu-watchdog/policy/policy.yaml --log agent.log --out bundle.tar.gz"])
    bundle.add_argument("--out", required=True, metavar="F.tar.gz", help="archive to write (replaced atomically)")
    bundle.add_argument("--config", help="the agent's settings YAML (default: the defaults and environment)")
    bundle.add_argument("--policy", help="the agent's policy YAML (default: the settings' policy_file or inline)")
    bundle.add_argument("--agent-url", help="the running agent's base URL (default: the settings' publishing "
                        "host and port on this host)")
    bundle.add_argument("--log", action="append", metavar="FILE",
                        help="the agent's log, e.g. a `kubectl logs` dump (repeatable; the last 20 MiB of each)")
    bundle.add_argument("--record-seconds", type=float, default=60.0, metavar="N",
                        help="without flight-recorder segments, record this long in observe mode (default 60; "
                        "0: skip)")
    bundle.add_argument("--simulate", metavar="SCENARIO", help="probe and record a simulated node instead of NVML")
    bundle.set_defaults(func=cmd_bundle)
