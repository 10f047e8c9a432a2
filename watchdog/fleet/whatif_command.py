"""The `whatif` subcommand: its flags, the checks made before any node is asked, the progress line, the exit code.

A policy with a bad field must fail here, once, with the field named — not four hundred times on the agents — so it
is validated exactly as a policy file is (replay's loader) before the API server is even asked. Failures a user can
fix (a file, the token, the cluster) raise and watchdog.cli_errors words them: one line, exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from watchdog.answers.agents import AGENT_NAMESPACE, NoAnswer
from watchdog.config import read_yaml
from watchdog.evaluation.progress import Progress
from watchdog.evaluation.replay_policy import policy_mapping
from watchdog.fleet.whatif import ANSWERED, FanOut, NodeOutcome, ask_all, find_targets
from watchdog.fleet.whatif_report import build, check, format_fleet

DEFAULT_TOKEN_FILE = "/var/run/secrets/gpu-watchdog-whatif/token"
"""Where the chart mounts the what-if token in the controller's pod (deploy/helm, ``whatif.enabled``)."""
EXIT_SOME_FAILED = 1
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def moment(text: str | None, *, now: float) -> str | float | None:
    """``--since``/``--until`` for the agent: a duration back from now (``90m``, ``24h``, ``2d``) as unix seconds;
    an RFC 3339 time or unix seconds as given."""
    if not text:
        return None
    found = _DURATION.match(text.strip())
    if found:
        return now - float(found.group(1)) * _UNIT[found.group(2)]
    try:
        return float(text)
    except ValueError:
        return text  # RFC 3339: the agent parses it and answers 400 naming the field if it cannot


def policy_body(path: str) -> dict[str, Any]:
    """The policy mapping to post, validated first as `replay --policy` validates it (ConfigError names the field;
    a scenario file gives its ``policy:`` section). Read once: ``/dev/stdin`` works (`kubectl exec -i … < P`)."""
    _, mapping = policy_mapping(read_yaml(path), source=path)
    return dict(mapping)


def read_token(path: str) -> str:
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise NoAnswer(f"cannot read the what-if token {path}: {exc.strerror or exc}; pass --token-file (the agents' "
                       "whatif.token_file holds the same token)") from None
    if not token:
        raise NoAnswer(f"the what-if token file {path} is empty")
    return token


async def _run(args: argparse.Namespace, body: dict[str, Any], token: str, progress: Progress) -> list[NodeOutcome]:
    from watchdog.kube import connect

    async with await connect(args.kubeconfig, context=args.context) as api:
        targets = await find_targets(api, namespace=args.namespace, selector=args.selector or "")
    if not targets:
        chosen = f" on nodes matching {args.selector!r}" if args.selector else ""
        raise NoAnswer(f"no gpu-watchdog agent pod{chosen} in namespace {args.namespace}: check --namespace and "
                       "--selector")
    progress.total = len(targets)

    def on_progress(outcome: NodeOutcome) -> None:  # a poll redraws the line; a final state counts a node
        progress.update(0 if outcome.state == "running" else 1)

    how = FanOut(body=body, token=token, concurrency=args.concurrency, timeout=args.timeout,
                 poll_seconds=args.poll_seconds, on_progress=on_progress)
    return await ask_all(targets, how)


def cmd_whatif(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    body = policy_body(args.policy)  # ConfigError / MalformedFile: worded by cli_errors, exit 2
    now = time.time()
    window = {key: value for key, value in (("since", moment(args.since, now=now)),
                                            ("until", moment(args.until, now=now))) if value is not None}
    token = read_token(args.token_file)
    progress = Progress("whatif", unit="nodes", stream=stderr)
    try:
        outcomes = asyncio.run(_run(args, {"policy": body, **window}, token, progress))
    finally:
        progress.close()
    check(outcomes)  # a node whose result cannot be read is listed as failed
    report = build(outcomes, policy=args.policy, window=window)
    if args.output == "json":
        json.dump(report, stdout, indent=2)
        stdout.write("\n")
    else:
        stdout.write(format_fleet(report, outcomes))
    return 0 if all(outcome.state == ANSWERED for outcome in outcomes) else EXIT_SOME_FAILED


EXIT_CODES = ("Exit 0: every node answered; 1: a node failed, refused, timed out, had no data or was cancelled (each "
              "is listed with its reason); 2: nothing was asked (bad policy, token, cluster, or no agent pods).")


def register(sub: Any) -> None:
    """Add `whatif` to the `gpu-watchdog` subcommands."""
    whatif = sub.add_parser(
        "whatif", help="what a candidate policy would have done on every node, from their flight recorders",
        description="Ask every node's agent to replay its flight recorder under a candidate policy and print one fleet "
                    "report: per node and in total, the eviction decisions and finding episodes only under P, only "
                    "under the policy in force, and shifted; the pods and tenants most affected; the nodes that could "
                    "not answer. Runs where the agents' what-if port is reachable (the controller's pod) and only "
                    "reads from the API server. " + EXIT_CODES,
        examples=["kubectl -n gpu-watchdog-controller exec -i deploy/gpu-watchdog-controller -- "
                  "gpu-watchdog whatif --policy /dev/stdin < candidate.yaml",
                  "gpu-watchdog whatif --policy candidate.yaml --since 6h --selector nvidia.com/gpu.product=H100 "
                  "--output json"])
    whatif.add_argument("--policy", required=True, metavar="P", help="candidate policy YAML (or a scenario's "
                        "policy: section), validated here first")
    whatif.add_argument("--since", default="24h", help="start of the window: a duration back (90m, 24h, 2d), RFC "
                        "3339 or unix seconds (default 24h)")
    whatif.add_argument("--until", help="end of the window, same forms (default: now)")
    whatif.add_argument("--selector", help="node label selector: ask only the agents on these nodes "
                        "(default: every agent pod)")
    whatif.add_argument("--namespace", default=AGENT_NAMESPACE, help="namespace of the agent DaemonSet")
    whatif.add_argument("--token-file", default=DEFAULT_TOKEN_FILE, help="bearer token of the agents' what-if API")
    whatif.add_argument("--concurrency", type=int, default=16, help="requests in flight at once (default 16)")
    whatif.add_argument("--timeout", type=float, default=600.0, help="seconds a node may take to answer, from its "
                        "POST (default 600); a slower node is listed as timed out")
    whatif.add_argument("--poll-seconds", type=float, default=1.0, help=argparse.SUPPRESS)
    whatif.add_argument("--output", "-o", choices=["text", "json"], default="text", help="report format")
    whatif.add_argument("--kubeconfig", help="kubeconfig (default $KUBECONFIG, ~/.kube/config, else in-cluster)")
    whatif.add_argument("--context", help="kubeconfig context")
    whatif.set_defaults(func=cmd_whatif)
