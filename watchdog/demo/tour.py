"""What the demo tells a newcomer to try next: the exact command lines, each of which works, as printed, against the
running demo.

The demo's world is a small multi-tenant cluster (its fake API server holds the tenants' namespaces, quotas and
policies, and the agent's own DaemonSet pod), so the commands a person runs against a real cluster work against it
unchanged: kubectl, `explain`, `inventory` and `audit` with the kubeconfig the demo writes, `record` and `replay`
on its scenario. The banner lists them; tests/test_cli_demo_tour.py parses it and runs every line against a
running demo, so a line that stops working fails the suite rather than the newcomer.

The format is the contract that test reads: a title line, a line ending in ":", then one shell command per line,
indented by two spaces, runnable in a POSIX shell as printed (``export`` lines first; a ``# comment`` may follow).
"""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

from watchdog.testbed.world import SimulatedWorld

TENANT_LABEL = "tenant"
"""Namespace label of the tenants the tour's audit checks (scenario ``cluster.namespaces``), when all carry it."""
RECORD_TICKS = 120


def _bin() -> Path:
    return Path(sys.executable).parent  # the venv's bin: gpu-watchdog and, with the test extras, kubectl


def _found(name: str) -> bool:
    """Whether ``name`` on PATH is the one beside this interpreter (or, for kubectl, any one at all)."""
    on_path = shutil.which(name)
    if name == "kubectl":
        return on_path is not None or not (_bin() / name).exists()
    return on_path is not None and Path(on_path).resolve() == (_bin() / name).resolve()


def _exports(kubeconfig: Path) -> list[str]:
    lines = []
    if (_bin() / "gpu-watchdog").exists() and not (_found("gpu-watchdog") and _found("kubectl")):
        lines.append(f'export PATH={shlex.quote(str(_bin()))}:"$PATH"')
    return lines + [f"export KUBECONFIG={shlex.quote(str(kubeconfig))}"]


def _program() -> str:
    return "gpu-watchdog" if (_bin() / "gpu-watchdog").exists() else f"{shlex.quote(sys.executable)} -m watchdog.cli"


def flagged_pod(world: SimulatedWorld) -> tuple[str, float] | None:
    """The pod to explain: the scenario's lowest-priority pod on a GPU (the first the policy would evict), with the
    simulated seconds after which it runs."""
    pods = [pod for pod in world.scenario.pods if pod.device is not None or pod.extra_devices]
    if not pods:
        return None
    pod = min(pods, key=lambda p: p.priority)
    return pod.key, pod.start_tick * world.scenario.tick_seconds


def tour(world: SimulatedWorld, port: int, kubeconfig: Path, *, scenario: str | Path,
         title: str = "gpu-watchdog demo") -> str:
    """The banner: where the agent serves, then the commands to try, one per line."""
    cli = _program()
    trace = shlex.quote(str(Path(world.workdir) / "demo.jsonl.gz"))
    namespaces = world.scenario.cluster.namespaces
    tenants = bool(namespaces) and all(TENANT_LABEL in labels for labels in namespaces.values())
    commands = [*_exports(kubeconfig),
                "kubectl get pods -A -o wide    # the tenants' pods, and the agent's own in gpu-watchdog",
                "kubectl get events -A    # what the agent told the cluster (dry-run evictions, unauthorized use)"]
    if any(gpu.vgpu is not None and gpu.vgpu.vms for gpu in world.scenario.gpus):
        commands += ["kubectl get vmi -A    # the KubeVirt VMs on the vGPU host, each run by a virt-launcher pod",
                     "kubectl get vmim -A    # the live migrations an eviction of a VM's launcher pod started"]
    pod = flagged_pod(world)
    if pod is not None:
        key, start = pod
        since = f", running from {start:.0f} s in" if start else ""
        commands.append(f"{cli} explain {key}    # why it is flagged: findings, decisions, Events{since}")
    commands += [
        f"{cli} inventory    # the node's GPUs and MIG layout and who holds each device, asked of its agent",
        f"{cli} audit{' --namespace-selector ' + TENANT_LABEL if tenants else ''}    # each tenant's isolation, "
        "with fixes (exit 1: some check fails)",
        f"{cli} record --simulate {shlex.quote(str(scenario))} --ticks {RECORD_TICKS} --fast --out {trace}",
        f"{cli} replay {trace} --report text    # detection and the eviction rules, offline, on that trace",
    ]
    head = (f"{title}: simulated node {world.scenario.node}, metrics on http://127.0.0.1:{port}/metrics "
            "(Ctrl-C stops it and removes its files)")
    return "\n".join([head, "Try, in another shell:", *(f"  {command}" for command in commands)]) + "\n"
