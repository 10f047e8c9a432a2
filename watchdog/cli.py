"""`gpu-watchdog` — the command line: the node agent, its simulation and evaluation, and the cluster's commands.

Each subcommand parses its flags, builds settings, and hands over to the layer that does the work; no logic of
the pipeline lives here.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import math
import os
import signal
import socket
import sys
import time
from typing import Any, Sequence

from watchdog import __version__
from watchdog.answers.commands import register as register_answers
from watchdog.fleet.whatif_command import register as register_whatif
from watchdog.cli_errors import EXIT_USAGE, CommandError, describe
from watchdog.cli_help import CommandParser, HelpFormatter
from watchdog.config import ConfigError, MalformedFile, check_data, load_policy, load_settings, read_yaml

log = logging.getLogger("watchdog")


def _setup_logging(level: str = "INFO", *, quiet: bool = False) -> None:
    logging.basicConfig(
        level=logging.ERROR if quiet else getattr(logging, level.upper(), logging.INFO),  # quiet: the live table shows findings
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _mode_flags(args: argparse.Namespace) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    if getattr(args, "mode", None):
        flags["mode_override"] = args.mode
    if getattr(args, "policy", None):
        flags["policy_file"] = args.policy
    return flags


# ------------------------------------------------------------------------------------------------ commands


def cmd_check_config(args: argparse.Namespace) -> int:
    """Exit 0: every file valid; 1: a file parsed but has invalid fields; 2: a file is unreadable or not YAML."""
    status = 0
    for path in args.files:
        try:
            kind, problems = check_data(read_yaml(path), source=path)
        except OSError as exc:
            print(f"{path}: cannot read: {exc.strerror or exc}")
            status = 2
            continue
        except MalformedFile as exc:
            print(exc)  # FILE:LINE: reason
            status = 2
            continue
        if problems:
            status = max(status, 1)
            print(f"{path}: invalid {kind} file, {len(problems)} problem(s):")
            for field, reason in problems:
                print(f"  {field}: {reason}")
        else:
            print(f"{path}: valid {kind} file")
            for field, reason in _policy_cautions(path, kind):
                print(f"  warning: {field}: {reason}")  # legal but dangerous: said, not refused (exit 0)
    return status


def _policy_cautions(path: str, kind: str) -> list[tuple[str, str]]:
    """The dangerous action values of a valid file (watchdog.action.floor.review), with their field paths."""
    from watchdog.action.floor import review

    if kind == "policy":
        action, prefix = load_policy(path).action, "action."
    else:
        action, prefix = load_settings(path, environ={}).policy.action, "policy.action."
    return [(prefix + caution.field, caution.message) for caution in review(action)]


def cmd_demo(args: argparse.Namespace) -> int:
    from watchdog.demo.screen import live_table
    from watchdog.demo.tour import tour
    from watchdog.testbed.runner import DEFAULT_SCENARIO, run_simulated

    if args.nodes > 1:  # the fleet what-if's bed: several nodes, each agent with a flight recorder
        from watchdog.evaluation.whatif import run_whatif
        from watchdog.testbed.fleet import serve_fleet

        if args.ticks < 1:
            print("gpu-watchdog demo: --ticks must be at least 1", file=sys.stderr)
            return 2
        _setup_logging(quiet=True)
        return _run_async(serve_fleet(nodes=args.nodes, ticks=args.ticks, failing=args.failing,
                                      whatif_worker=run_whatif, out=sys.stdout))
    tui = sys.stdout.isatty() and not args.no_tui
    _setup_logging(quiet=tui)
    scenario = args.scenario or DEFAULT_SCENARIO
    flags = _mode_flags(args)
    return _run_async(run_simulated(scenario, port=args.port, config=args.config, flags=flags,
                                    screen=live_table(sys.stdout) if tui else None, speed=args.speed,
                                    banner=functools.partial(tour, scenario=scenario)))


def cmd_run(args: argparse.Namespace) -> int:
    flags = _mode_flags(args)
    if args.port is not None:
        flags["publishing"] = {"port": args.port}
    if args.simulate:
        from watchdog.demo.tour import tour
        from watchdog.testbed.runner import run_simulated

        _setup_logging()
        port = 9435 if args.port is None else args.port
        from watchdog.evaluation.whatif import run_whatif

        banner = functools.partial(tour, scenario=args.simulate, title="gpu-watchdog run --simulate")
        return _run_async(run_simulated(args.simulate, port=port, config=args.config, flags=flags, banner=banner,
                                        whatif_worker=run_whatif))
    settings, nvml, status = _load_real(args)
    if status:
        return status
    if args.port is not None:
        settings = settings.model_copy(update={"publishing": settings.publishing.model_copy(update={"port": args.port})})
    _setup_logging(settings.log_level)
    return _run_async(_run_real(settings, nvml))


def _load_real(args: argparse.Namespace):
    """Settings and the real NVML module, or an exit status with a one-line reason."""
    try:
        settings = load_settings(args.config, flags=_mode_flags(args))
    except ConfigError as exc:
        print(f"gpu-watchdog: {exc}", file=sys.stderr)
        return None, None, 2
    from watchdog.sampling.nvml_library import NvmlLibraryMissing, load_usable

    try:
        return settings, load_usable(), 0
    except NvmlLibraryMissing as exc:
        print(f"gpu-watchdog: {exc}", file=sys.stderr)
        return None, None, 2


async def _run_real(settings, nvml, sinks: Sequence[Any] = (), *, ticks: int | None = None) -> None:
    from watchdog.kube.client import KubeApi
    from watchdog.service.agent import Agent

    if not settings.node_name:
        settings = settings.model_copy(update={"node_name": os.environ.get("NODE_NAME") or socket.gethostname()})
    from watchdog.sampling.sampler import NvmlUnavailable

    from watchdog.kube.errors import KubeError

    try:
        kube = await KubeApi.from_settings(settings.kube)
    except KubeError as exc:
        # A DaemonSet without its service account (or a bad kubeconfig) must not run on quietly blind: fail the
        # start so the kubelet restarts it and the operator sees why. `kube.access: none` opts out explicitly.
        raise CommandError(f"cannot reach the Kubernetes API ({exc}); set kube.access: none to run "
                           "without pod attribution and actions") from None
    from watchdog.evaluation.whatif import run_whatif  # the what-if API's replay, run in its worker process

    try:
        await Agent(settings, nvml=nvml, clock=time.time, monotonic=time.monotonic, kube=kube,
                    sinks=sinks, whatif_worker=run_whatif).run(ticks=ticks)
    except NvmlUnavailable as exc:
        raise CommandError(
            f"no usable NVML ({exc}). Without a GPU, run the simulation instead: "
            "`gpu-watchdog run --simulate scenarios/demo.yaml` or `gpu-watchdog demo`."
        ) from None
    finally:
        if kube is not None:
            await kube.close()


def cmd_probe(args: argparse.Namespace) -> int:
    from watchdog.sampling.nvml_library import NvmlLibraryMissing, load
    from watchdog.sampling.probe_table import render_table
    from watchdog.service.node_probe import probe_node

    try:
        paths = load_settings(args.config).attribution  # the agent's kubelet socket and proc root
    except ConfigError as exc:
        print(f"gpu-watchdog: {exc}", file=sys.stderr)
        return 2
    sleep = time.sleep
    if args.simulate:
        from watchdog.testbed import SimClock, SimulatedGpuNode

        clock = SimClock(1.0)
        nvml, sleep = SimulatedGpuNode.from_scenario(args.simulate, clock).nvml, clock.advance
    else:
        try:
            nvml = load()
        except NvmlLibraryMissing as exc:
            print(f"gpu-watchdog: {exc}", file=sys.stderr)
            return 2
    report = probe_node(nvml, kubelet_socket=paths.kubelet_socket, proc_root=paths.proc_root, sleep=sleep)
    if args.json:
        json.dump(report, sys.stdout, indent=2, sort_keys=True)
        print()
    else:
        sys.stdout.write(render_table(report))
    if not report["nvmlInit"]["supported"]:  # scriptable: no usable NVML is a failure, with the report above
        print(f"gpu-watchdog probe: nvmlInit failed ({report['nvmlInit']['error']})", file=sys.stderr)
        return 1
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    """Record in observe mode: a recorder beside a running DaemonSet must never become a second actor."""
    from watchdog.trace import TraceRecorder

    _setup_logging()
    source = f"simulated:{args.simulate}" if args.simulate else "nvml"
    flags = {"mode_override": "observe"}
    try:
        interval = load_settings(args.config, flags=flags).sampling.interval_seconds
    except ConfigError as exc:
        print(f"gpu-watchdog: {exc}", file=sys.stderr)
        return 2
    from watchdog.evaluation.progress import Progress, ProgressSink

    recorder = TraceRecorder(args.out, tick_seconds=interval, source=source)
    progress = Progress("record", total=args.ticks)
    sinks = (recorder, ProgressSink(progress))
    try:
        if args.simulate:  # no banner: the simulated cluster is gone when the recording ends
            from watchdog.testbed.runner import run_simulated

            speed = math.inf if args.fast else args.speed  # --fast: the next tick as soon as the agent is done
            status = _run_async(run_simulated(args.simulate, port=args.port, config=args.config, sinks=sinks,
                                              ticks=args.ticks, speed=speed, flags=flags))
        else:
            args.mode = "observe"
            settings, nvml, status = _load_real(args)
            status = status or _run_async(_run_real(settings, nvml, sinks, ticks=args.ticks))
    finally:
        progress.close()
        recorder.close()
    if status == 0:  # also after Ctrl-C: what was recorded is kept, and said
        print(f"gpu-watchdog record: wrote {recorder.ticks_written} ticks to {args.out}")
    return status


def cmd_replay(args: argparse.Namespace) -> int:
    from watchdog.evaluation.replay_command import replay_command

    return replay_command(args, stdout=sys.stdout, stderr=sys.stderr)


def cmd_eval(args: argparse.Namespace) -> int:
    from watchdog.evaluation.evaluate import evaluate, format_table, scenario_files
    from watchdog.evaluation.progress import Progress

    policy = load_policy(args.policy) if args.policy else None
    progress = Progress("eval", total=len(scenario_files(args.paths)), unit="scenarios")
    try:
        result = evaluate(args.paths, base_policy=policy, on_result=lambda _: progress.update())
    finally:
        progress.close()
    print(format_table(result))
    return 0


def cmd_controller(args: argparse.Namespace) -> int:
    from watchdog.controller.service import run_controller
    from watchdog.kube import command_line_access

    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(f"gpu-watchdog: {exc}", file=sys.stderr)
        return 2
    _setup_logging(settings.log_level)
    kube = command_line_access(settings.kube, kubeconfig=args.kubeconfig, context=args.context)  # as explain, audit
    return _run_async(run_controller(settings, kube=kube))


def cmd_audit(args: argparse.Namespace) -> int:
    """Exit 0: nothing failed; 1: a check failed or could not run; 2: the cluster could not be read at all;
    3: no namespace is a tenant (the selector matched none, or the cluster has only kube-* ones): nothing audited."""
    from watchdog.controller.isolation_audit import audit_cluster
    from watchdog.isolation import RENDERERS, AuditSettings
    from watchdog.kube import KubeError, connect

    async def audit():
        async with await connect(args.kubeconfig, context=args.context) as api:
            settings = AuditSettings(tenant_label=args.tenant_label or "", pool_label=args.pool_label or "",
                                     **({"reserved_label": args.reserved_label} if args.reserved_label else {}))
            return await audit_cluster(api, settings=settings, namespace_selector=args.namespace_selector or "",
                                       prometheus_url=args.prometheus or "")

    try:
        report = asyncio.run(audit())
    except KubeError as exc:
        print(f"gpu-watchdog audit: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(RENDERERS[args.output](report))
    if report.errors and not report.results:
        return 2
    if not report.namespaces:  # an empty report must not read as a clean bill of health
        matched = f"matches --namespace-selector {args.namespace_selector!r}" if args.namespace_selector else "exists"
        print(f"gpu-watchdog audit: nothing audited: no tenant namespace {matched} (kube-system, kube-public and "
              "kube-node-lease are never tenants)", file=sys.stderr)
        return 3
    return 1 if report.failed else 0


def _run_async(coro) -> int:
    """Run until done, Ctrl-C or SIGTERM (a pod stop): both cancel the main task so every stage shuts down cleanly
    (the Xid thread stops, NVML shuts down, the MQTT stream says offline, a leader releases its Lease)."""

    async def main() -> None:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, task.cancel)
        try:
            await coro
        except asyncio.CancelledError:
            log.info("stopping")

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    return 0


# --------------------------------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-watchdog", formatter_class=HelpFormatter,
        description="Per-node GPU/MIG tenant-isolation agent and its cluster controller: one subcommand per task.",
        epilog="`gpu-watchdog COMMAND --help` describes a command, its flags with their defaults, and an example.")
    parser.add_argument("--version", action="version", version=f"gpu-watchdog {__version__}")
    # Every subcommand's parser is a CommandParser (watchdog/cli_help.py): description, defaults and examples alike.
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)

    run = sub.add_parser(
        "run", help="run the node agent (real NVML, or --simulate SCENARIO)",
        description="Run the node agent: sample NVML every tick, attribute devices to pods, detect quota breaches and "
                    "interference, and act as the policy's mode says (observe, dry-run, enforce). With --simulate the "
                    "same agent runs against a simulated GPU node.",
        examples=["gpu-watchdog run --config settings.yaml --policy policy.yaml",
                  "gpu-watchdog run --simulate scenarios/demo.yaml --port 9500"])
    run.add_argument("--config", help="settings YAML")
    run.add_argument("--simulate", metavar="SCENARIO", help="run against a simulated node instead of NVML")
    run.add_argument("--port", type=int, help="metrics port (default 9435)")
    run.add_argument("--mode", choices=["observe", "dry-run", "enforce"], help="override the policy's mode")
    run.add_argument("--policy", help="policy YAML, reloaded while running")
    run.set_defaults(func=cmd_run)

    demo = sub.add_parser(
        "demo", help="the whole pipeline on a simulated GPU node",
        description="The whole pipeline on a simulated GPU node and cluster: a live table on a terminal, metrics on "
                    "--port, and a fake API server kubectl can explore.",
        examples=["gpu-watchdog demo", "gpu-watchdog demo --mode enforce --speed 5 --no-tui",
                  "gpu-watchdog demo --nodes 3 --failing"])
    demo.add_argument("--port", type=int, default=9435, help="metrics port (default 9435; 0 picks a free one)")
    demo.add_argument("--scenario", help="scenario YAML (default scenarios/demo.yaml)")
    demo.add_argument("--config", help="settings YAML")
    demo.add_argument("--mode", choices=["observe", "dry-run", "enforce"], help="action mode (default dry-run)")
    demo.add_argument("--policy", help="policy YAML, reloaded while running")
    demo.add_argument("--speed", type=float, default=1.0, help="simulated seconds per real second")
    demo.add_argument("--no-tui", action="store_true", help="no live table, even on a terminal")
    demo.add_argument("--nodes", type=int, default=1, help="more than 1: that many simulated nodes, each agent "
                      "recording --ticks ticks at speed into its flight recorder, for `gpu-watchdog whatif`")
    demo.add_argument("--ticks", type=int, default=300, help="with --nodes: ticks each agent records (default 300)")
    demo.add_argument("--failing", action="store_true", help="with --nodes: add a node that is down, one that "
                      "answers slowly and one whose recorder is empty")
    demo.set_defaults(func=cmd_demo)

    probe = sub.add_parser(
        "probe", help="check this node's prerequisites and which NVML calls its GPUs support",
        description="Check the node's prerequisites (kubelet socket, host PIDs, cgroups, driver, persistence, MIG, "
                    "GPM), then print which NVML calls each GPU and MIG device supports and what they return, as a "
                    "table (--json: every answer): the first command to run on a new node (docs/probe.md). "
                    "Read-only. Exit 1 when NVML cannot be initialised.",
        examples=["gpu-watchdog probe --config /etc/gpu-watchdog/settings/settings.yaml",
                  "gpu-watchdog probe --json", "gpu-watchdog probe --simulate scenarios/demo.yaml"])
    probe.add_argument("--simulate", metavar="SCENARIO", help="probe a simulated node")
    probe.add_argument("--config", help="settings YAML: the kubelet socket and proc root the agent uses")
    probe.add_argument("--json", action="store_true", help="every answer as JSON instead of the table")
    probe.set_defaults(func=cmd_probe)

    check = sub.add_parser(
        "check-config", help="validate settings or policy files",
        description="Validate settings or policy files (the kind is told by their keys) and name every invalid "
                    "field. Exit 0: every file is valid; 1: a file has invalid fields; 2: a file is unreadable or not "
                    "YAML.",
        examples=["gpu-watchdog check-config settings.yaml policy.yaml"])
    check.add_argument("files", nargs="+", metavar="FILE", help="settings or policy YAML (the kind is detected)")
    check.set_defaults(func=cmd_check_config)

    record = sub.add_parser(
        "record", help="write each tick's sample and attribution as JSON lines",
        description="Write each tick's sample and attribution to a trace (docs/trace-format.md), always in observe "
                    "mode; replay and eval read it.",
        examples=["gpu-watchdog record --out run.jsonl.gz --ticks 600",
                  "gpu-watchdog record --simulate scenarios/demo.yaml --out demo.jsonl --ticks 120 --fast"])
    record.add_argument("--out", required=True, help="trace file to write (JSON lines; replay and eval read it)")
    record.add_argument("--simulate", metavar="SCENARIO", help="record a simulated node instead of NVML")
    record.add_argument("--ticks", type=int, help="stop after this many ticks")
    record.add_argument("--config", help="settings YAML (the mode is always observe)")
    record.add_argument("--port", type=int, default=0, help="metrics port (default 0: a free one)")
    record.add_argument("--speed", type=float, default=1.0,
                        help="with --simulate: simulated seconds per real second (10: ten ticks of 1 s per second)")
    record.add_argument("--fast", action="store_true",
                        help="with --simulate: as fast as the agent can tick (overrides --speed)")
    record.set_defaults(func=cmd_record)

    replay = sub.add_parser(
        "replay", help="re-run detection and the eviction rules on a trace",
        description="Re-run detection and the eviction rules on recorded traces under a policy, offline and "
                    "deterministically, and report the findings and decisions (docs/report-format.md).",
        examples=["gpu-watchdog replay run.jsonl.gz --policy policy.yaml --report text",
                  "gpu-watchdog replay run.jsonl.gz --policy a.yaml --compare b.yaml"])
    replay.add_argument("trace", nargs="+", help="trace file (.jsonl or .jsonl.gz) or directory of flight-recorder "
                        "segments; several: one report each")
    replay.add_argument("--policy", help="policy YAML, or a scenario YAML (its policy: section); default: the "
                        "policy the trace recorded")
    replay.add_argument("--report", choices=["json", "text"], default=None,
                        help="report format on stdout (default: text on a terminal, JSON otherwise)")
    replay.add_argument("--compare", metavar="POLICY_B",
                        help="replay again under this policy (or scenario) YAML and print what changes (only in A, "
                        "only in B, shifted)")
    replay.add_argument("--workers", type=int, default=1, help="replay several traces in this many processes")
    replay.add_argument("--plot", metavar="OUT.png", help="draw a timeline per contention domain (needs matplotlib)")
    replay.add_argument("--namespace", default="gpu-watchdog", help="the agent's own namespace (always protected)")
    replay.add_argument("--tenant-label", help="pod label naming the tenant, as the policy's action.tenant_label")
    replay.set_defaults(func=cmd_replay)

    ev = sub.add_parser(
        "eval", help="precision, recall and latency on labelled scenarios",
        description="Run labelled scenarios through the agent and print precision, recall and detection latency per "
                    "finding kind (docs/evaluation.md).",
        examples=["gpu-watchdog eval scenarios/"])
    ev.add_argument("paths", nargs="+", metavar="PATH", help="labelled scenario files or directories of them")
    ev.add_argument("--policy", help="policy YAML to evaluate instead of each scenario's own")
    ev.set_defaults(func=cmd_eval)

    audit = sub.add_parser(
        "audit", help="check each tenant's isolation (quotas, node pools, GPU sharing, network)",
        description="Check each tenant's isolation in the cluster's configuration (quotas, node pools, GPU sharing, "
                    "network) and print the objects that fix each failure. Exit 0: nothing failed; 1: a check failed "
                    "or could not run; 2: the cluster could not be read; 3: no namespace is a tenant, nothing "
                    "audited.",
        examples=["gpu-watchdog audit", "gpu-watchdog audit --namespace-selector gpu-tenant=true -o json"])
    audit.add_argument("--kubeconfig", help="kubeconfig (default $KUBECONFIG, ~/.kube/config, else in-cluster)")
    audit.add_argument("--context", help="kubeconfig context")
    audit.add_argument("--namespace-selector", help="label selector picking the tenants' namespaces (default all)")
    audit.add_argument("--tenant-label", help="namespace label naming the tenant (default: one tenant per namespace)")
    audit.add_argument("--pool-label", help="node label naming the node pool (default nvidia.com/gpu.product)")
    audit.add_argument("--reserved-label", help="node label naming the only tenant allowed on the node")
    audit.add_argument("--prometheus", metavar="URL", help="Prometheus scraping the agents: name who shares each GPU")
    audit.add_argument("--output", "-o", choices=["table", "json", "yaml"], default="table", help="report format")
    audit.set_defaults(func=cmd_audit)

    register_answers(sub)  # explain, inventory, bundle
    register_whatif(sub)  # the fleet what-if, from the controller's pod

    ctl = sub.add_parser(
        "controller", help="the cluster controller acting on Alertmanager webhooks",
        description="The cluster controller: Alertmanager posts eviction alerts to its webhook, and the leader "
                    "replica evicts under the agents' rules (docs/alerting.md). Without kube.access in the settings it "
                    "uses the kubeconfig kubectl would, else its service account.",
        examples=["gpu-watchdog controller --config controller.yaml",
                  "gpu-watchdog controller --config controller.yaml --kubeconfig ~/.kube/dev --context dev"])
    ctl.add_argument("--config", help="settings YAML (controller, kube, policy sections)")
    ctl.add_argument("--kubeconfig", help="kubeconfig, over the settings' kube section (default $KUBECONFIG, "
                     "~/.kube/config, else in-cluster, unless the settings name kube.access)")
    ctl.add_argument("--context", help="kubeconfig context")
    ctl.set_defaults(func=cmd_controller)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; a failure the user can fix (file, port, settings, cluster) is one line on stderr, exit 2."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except Exception as exc:  # worded by cli_errors, or re-raised with its traceback (a bug)
        line = describe(exc, command=args.command)
        if line is None:
            raise
        print(f"gpu-watchdog {args.command}: {line}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
