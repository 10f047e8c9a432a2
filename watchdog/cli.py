"""`gpu-watchdog` — the command line: run, demo, probe, check-config, record, replay, eval, controller.

Each subcommand parses its flags, builds settings, and hands over to the layer that does the work; no logic of
the pipeline lives here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
import sys
import time
from typing import Any, Sequence

from watchdog import __version__
from watchdog.config import ConfigError, MalformedFile, Policy, check_data, load_policy, load_settings, read_yaml

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
    from watchdog.testbed.runner import DEFAULT_SCENARIO, run_simulated

    tui = sys.stdout.isatty() and not args.no_tui
    _setup_logging(quiet=tui)
    scenario = args.scenario or DEFAULT_SCENARIO
    flags = _mode_flags(args)
    return _run_async(run_simulated(scenario, port=args.port, config=args.config, flags=flags,
                                    screen=live_table(sys.stdout) if tui else None, speed=args.speed))


def cmd_run(args: argparse.Namespace) -> int:
    flags = _mode_flags(args)
    if args.port is not None:
        flags["publishing"] = {"port": args.port}
    if args.simulate:
        from watchdog.testbed.runner import run_simulated

        _setup_logging()
        port = 9435 if args.port is None else args.port
        return _run_async(run_simulated(args.simulate, port=port, config=args.config, flags=flags))
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
        raise SystemExit(f"gpu-watchdog: cannot reach the Kubernetes API ({exc}); set kube.access: none to run "
                         "without pod attribution and actions") from None
    try:
        await Agent(settings, nvml=nvml, clock=time.time, kube=kube, sinks=sinks).run(ticks=ticks)
    except ConfigError as exc:
        raise SystemExit(f"gpu-watchdog: {exc}") from None
    except NvmlUnavailable as exc:
        raise SystemExit(
            f"gpu-watchdog: no usable NVML ({exc}). Without a GPU, run the simulation instead: "
            "`gpu-watchdog run --simulate scenarios/demo.yaml` or `gpu-watchdog demo`."
        ) from None
    finally:
        if kube is not None:
            await kube.close()


def cmd_probe(args: argparse.Namespace) -> int:
    from watchdog.sampling.nvml_library import NvmlLibraryMissing, load
    from watchdog.sampling.probe import probe

    if args.simulate:
        from watchdog.testbed import SimClock, SimulatedGpuNode

        nvml = SimulatedGpuNode.from_scenario(args.simulate, SimClock(1.0)).nvml
    else:
        try:
            nvml = load()
        except NvmlLibraryMissing as exc:
            print(f"gpu-watchdog: {exc}", file=sys.stderr)
            return 2
    report = probe(nvml)
    json.dump(report, sys.stdout, indent=2, sort_keys=True)
    print()
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
    recorder = TraceRecorder(args.out, tick_seconds=interval, source=source)
    try:
        if args.simulate:
            from watchdog.testbed.runner import run_simulated

            return _run_async(run_simulated(args.simulate, port=args.port, config=args.config, sinks=(recorder,),
                                            ticks=args.ticks, speed=args.speed, flags=flags))
        args.mode = "observe"
        settings, nvml, status = _load_real(args)
        if status:
            return status
        return _run_async(_run_real(settings, nvml, (recorder,), ticks=args.ticks))
    finally:
        recorder.close()


def cmd_replay(args: argparse.Namespace) -> int:
    from watchdog.evaluation.replay import replay
    from watchdog.trace import TraceError

    try:
        policy = load_policy(args.policy) if args.policy else Policy()
        report = replay(args.trace, policy=policy, own_namespace=args.namespace, tenant_label=args.tenant_label)
    except (ConfigError, TraceError) as exc:
        print(f"gpu-watchdog replay: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"gpu-watchdog replay: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    json.dump(report, sys.stdout, indent=2, sort_keys=False)
    print()
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from watchdog.evaluation.evaluate import evaluate, format_table

    policy = load_policy(args.policy) if args.policy else None
    result = evaluate(args.paths, base_policy=policy)
    print(format_table(result))
    return 0


def cmd_controller(args: argparse.Namespace) -> int:
    from watchdog.controller.service import run_controller

    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(f"gpu-watchdog: {exc}", file=sys.stderr)
        return 2
    _setup_logging(settings.log_level)
    return _run_async(run_controller(settings))


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
    parser = argparse.ArgumentParser(prog="gpu-watchdog", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"gpu-watchdog {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the node agent (real NVML, or --simulate SCENARIO)")
    run.add_argument("--config", help="settings YAML")
    run.add_argument("--simulate", metavar="SCENARIO", help="run against a simulated node instead of NVML")
    run.add_argument("--port", type=int, help="metrics port (default 9435)")
    run.add_argument("--mode", choices=["observe", "dry-run", "enforce"], help="override the policy's mode")
    run.add_argument("--policy", help="policy YAML, reloaded while running")
    run.set_defaults(func=cmd_run)

    demo = sub.add_parser("demo", help="the whole pipeline on a simulated GPU node")
    demo.add_argument("--port", type=int, default=9435)
    demo.add_argument("--scenario", help="scenario YAML (default scenarios/demo.yaml)")
    demo.add_argument("--config", help="settings YAML")
    demo.add_argument("--mode", choices=["observe", "dry-run", "enforce"], help="action mode (default dry-run)")
    demo.add_argument("--policy", help="policy YAML, reloaded while running")
    demo.add_argument("--speed", type=float, default=1.0, help="simulated seconds per real second")
    demo.add_argument("--no-tui", action="store_true", help="no live table, even on a terminal")
    demo.set_defaults(func=cmd_demo)

    probe = sub.add_parser("probe", help="print which NVML calls this GPU supports and what they return")
    probe.add_argument("--simulate", metavar="SCENARIO", help="probe a simulated node")
    probe.set_defaults(func=cmd_probe)

    check = sub.add_parser("check-config", help="validate settings or policy files")
    check.add_argument("files", nargs="+")
    check.set_defaults(func=cmd_check_config)

    record = sub.add_parser("record", help="write each tick's sample and attribution as JSON lines")
    record.add_argument("--out", required=True)
    record.add_argument("--simulate", metavar="SCENARIO")
    record.add_argument("--ticks", type=int, help="stop after this many ticks")
    record.add_argument("--config")
    record.add_argument("--port", type=int, default=0)
    record.add_argument("--speed", type=float, default=1.0)
    record.set_defaults(func=cmd_record)

    replay = sub.add_parser("replay", help="re-run detection and the eviction rules on a trace")
    replay.add_argument("trace")
    replay.add_argument("--policy", help="policy YAML")
    replay.add_argument("--report", choices=["json"], default="json")
    replay.add_argument("--namespace", default="gpu-watchdog", help="the agent's own namespace (always protected)")
    replay.add_argument("--tenant-label", help="pod label naming the tenant, as attribution.tenant_label")
    replay.set_defaults(func=cmd_replay)

    ev = sub.add_parser("eval", help="precision, recall and latency on labelled scenarios")
    ev.add_argument("paths", nargs="+")
    ev.add_argument("--policy")
    ev.set_defaults(func=cmd_eval)

    ctl = sub.add_parser("controller", help="the cluster controller acting on Alertmanager webhooks")
    ctl.add_argument("--config")
    ctl.set_defaults(func=cmd_controller)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
