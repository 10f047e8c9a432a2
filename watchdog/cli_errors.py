"""What `gpu-watchdog` prints when a command cannot start: one line that says what to do, and exit status 2.

A traceback for a port already in use, a mistyped `--config` path or a laptop without a cluster tells the person
at the terminal nothing they can act on, and hides the one line that matters at the bottom of thirty. The failures
a user causes (a file, a port, a cluster, a setting) are worded here; anything else is a bug and keeps its
traceback. The wording names the flag or setting to change, as kubectl's and Prometheus's start-up errors do.
"""

from __future__ import annotations

import errno
import re

from watchdog.answers.agents import NoAnswer
from watchdog.config import ConfigError, MalformedFile
from watchdog.kube.errors import KubeConfigUnusable, KubeError
from watchdog.sampling.nvml_library import NvmlLibraryMissing
from watchdog.sampling.sampler import NvmlUnavailable
from watchdog.testbed.scenario import ScenarioError
from watchdog.trace import TraceError

EXIT_USAGE = 2
"""Exit status of every worded failure (argparse uses 2 for a bad command line too)."""

_KUBECONFIG_COMMANDS = ("explain", "inventory", "audit")
"""Commands with --kubeconfig and no --config: pointing them at a cluster is kubectl's way, not a settings file."""
_BOUND_ADDRESS = re.compile(r"\('([^']*)', (\d+)\)")


class CommandError(Exception):
    """A reason the command cannot go on, already worded for the person who typed it."""


def _one_line(text: str) -> str:
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


def _port_in_use(exc: OSError, *, command: str) -> str:
    found = _BOUND_ADDRESS.search(str(exc))
    where = f"{found.group(1)}:{found.group(2)}" if found else "the port"
    if command == "controller":
        change = "set controller.listen_port in the --config settings"
    else:
        change = "pick another with --port N"
    return f"{where} is already in use: stop whatever listens there or {change}"


def _reach(command: str) -> str:
    """How to point a command at a cluster: the commands a person runs take kubectl's flag; the agent and the
    controller read their settings."""
    if command in _KUBECONFIG_COMMANDS:
        return "point it at one with --kubeconfig FILE or $KUBECONFIG, as kubectl"
    return "point it at one with kube.access: kubeconfig and kube.kubeconfig (or kube.url) in the --config settings"


def describe(exc: BaseException, *, command: str) -> str | None:
    """The one line for a failure the user can fix, or None for a bug (which keeps its traceback)."""
    if isinstance(exc, CommandError):
        return _one_line(str(exc))
    if isinstance(exc, MalformedFile):
        return f"{_one_line(str(exc))}: fix the file (`gpu-watchdog check-config FILE` lists every problem)"
    if isinstance(exc, ConfigError):
        fields = "; ".join(f"{field}: {reason}" for field, reason in exc.problems)
        return f"{exc.source}: invalid settings ({fields}); `gpu-watchdog check-config {exc.source}` explains each"
    if isinstance(exc, ScenarioError):
        return f"{_one_line(str(exc))} (the format: docs/scenario-format.md; the built-in demo: scenarios/demo.yaml)"
    if isinstance(exc, TraceError):
        return f"{_one_line(str(exc))}: is this a trace written by `gpu-watchdog record`?"
    if isinstance(exc, KubeConfigUnusable):
        return (f"{_one_line(str(exc))}: check --kubeconfig and $KUBECONFIG (the agent and the controller also read "
                "kube.kubeconfig in the --config settings)")
    if isinstance(exc, KubeError) and exc.status == 404:
        return f"not found in the cluster ({_one_line(str(exc))}): check the namespace and the name"
    if isinstance(exc, KubeError) and exc.status is not None:
        return f"the Kubernetes API refused ({_one_line(str(exc))}): check the kubeconfig's user and its RBAC"
    if isinstance(exc, KubeError):
        return f"cannot reach the Kubernetes API ({_one_line(str(exc))}): run it in the cluster, or {_reach(command)}"
    if isinstance(exc, NoAnswer):
        return _one_line(str(exc))  # it says what to pass instead
    if isinstance(exc, (NvmlUnavailable, NvmlLibraryMissing)):
        return _one_line(str(exc))  # their messages already say what to do (the driver, or --simulate)
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return _port_in_use(exc, command=command)
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}: check the path"
    return None
