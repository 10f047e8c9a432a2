"""The `explain` and `inventory` subcommands: their flags and their output, registered by watchdog.cli.

They live beside what they print rather than in cli.py so the command line stays a table of contents; a failure a
user can fix (no such pod, no cluster, no NVML) raises, and watchdog.cli_errors words it (one line, exit 2).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any


def _kubeconfig(flag: str | None) -> str | None:
    """As kubectl: --kubeconfig, else the first $KUBECONFIG entry, else ~/.kube/config; None means in-cluster."""
    if flag:
        return flag
    first = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if first:
        return first
    default = os.path.expanduser("~/.kube/config")
    return default if os.path.exists(default) else None


def _pod_name(text: str) -> tuple[str, str]:
    namespace, slash, name = text.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/POD, got {text!r}")
    return namespace, name


async def _explain(args: argparse.Namespace) -> dict[str, Any] | str:
    from watchdog.answers.explain import as_json, explain, render_text
    from watchdog.kube import KubeApi

    kubeconfig = _kubeconfig(args.kubeconfig)
    api = await KubeApi.from_kubeconfig(kubeconfig, context=args.context) if kubeconfig else KubeApi.in_cluster()
    async with api:
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

    if args.simulate:
        from watchdog.testbed import SimClock, SimulatedGpuNode

        nvml = SimulatedGpuNode.from_scenario(args.simulate, SimClock()).nvml
    else:
        from watchdog.sampling.nvml_library import load_usable

        nvml = load_usable()
    rows = read_inventory(nvml, agent_url=args.agent_url)
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
    else:
        sys.stdout.write(format_table(rows))
    return 0


def register(sub: Any) -> None:
    """Add `explain` and `inventory` to the `gpu-watchdog` subcommands."""
    explain = sub.add_parser("explain", help="why gpu-watchdog flagged, spared or evicted a pod, in words")
    explain.add_argument("pod", type=_pod_name, metavar="NAMESPACE/POD", help="the pod to explain")
    explain.add_argument("--kubeconfig", help="kubeconfig (default $KUBECONFIG, ~/.kube/config, else in-cluster)")
    explain.add_argument("--context", help="kubeconfig context")
    explain.add_argument("--agent-url", help="the node agent's base URL (default: its pod IP on the pod's node)")
    explain.add_argument("--agent-namespace", default="gpu-watchdog", help="namespace of the agent DaemonSet")
    explain.add_argument("--agent-port", type=int, default=9435, help="the agent's metrics/API port")
    explain.add_argument("--json", action="store_true", help="print the gathered facts as JSON")
    explain.set_defaults(func=cmd_explain)

    inventory = sub.add_parser("inventory", help="this node's GPUs, MIG layout and who holds each instance")
    inventory.add_argument("--simulate", metavar="SCENARIO", help="a simulated node instead of NVML")
    inventory.add_argument("--agent-url", help="ask this agent (e.g. http://127.0.0.1:9435) which pod holds each "
                           "device (default: holders unknown)")
    inventory.add_argument("--json", action="store_true", help="one JSON object per device instead of a table")
    inventory.set_defaults(func=cmd_inventory)
