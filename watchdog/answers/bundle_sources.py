"""Where the parts of a support bundle come from: the flight recorder or a fresh recording, one scrape of the
running agent, the effective settings and policy, and the versions of everything underneath.

Each reader either returns what it found or raises; the bundle (watchdog.answers.bundle) turns a failure into a
note inside the archive, because a bug report with four parts of five is still a bug report. Nothing here acts: a
fresh recording is `gpu-watchdog record`, always in observe mode, in a child process whose port, flight recorder,
MQTT stream and audit file are switched off so it never stands in for the running agent.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any, Iterator

from watchdog import __version__
from watchdog.answers.redact import SECRET_FILES, redact
from watchdog.config import Settings, load_policy
from watchdog.config.runtime import RuntimePolicy
from watchdog.trace.flight import segments

MIB = 1024 * 1024
METRICS_CAP = 64 * MIB
"""A scrape larger than this is cut (the agent's own series budget keeps it far below, docs/metrics.md)."""
_BUILD_INFO = re.compile(r"^gpu_watchdog_build_info\{([^}]*)\}", re.M)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def to_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str) + "\n"


# ----------------------------------------------------------------------------------------------- settings


def effective_settings(settings: Settings) -> dict[str, Any]:
    """The settings as the agent would run with them, secrets replaced (watchdog.answers.redact)."""
    data, replaced = redact(settings.model_dump(mode="json"))
    return {"settings": data, "redacted": replaced,
            "secretFiles": {path: "path kept; contents never read" for path in sorted(SECRET_FILES)}}


def effective_policy(settings: Settings) -> dict[str, Any]:
    """The policy as the agent applies it: the policy file (else the inline one), resolved as the agent resolves it
    (its own namespace protected, the tenant label, a forced mode). Raises ConfigError for an invalid file."""
    policy = load_policy(settings.policy_file) if settings.policy_file else settings.policy
    runtime = RuntimePolicy.resolve(policy, own_namespace=settings.namespace,
                                    tenant_label=settings.attribution.tenant_label,
                                    mode_override=settings.mode_override)
    data, replaced = redact({"detection": runtime.detection.model_dump(mode="json"),
                             "action": runtime.action.model_dump(mode="json")})
    return {"source": settings.policy_file or "settings (inline policy)", "policy": data, "redacted": replaced}


# ----------------------------------------------------------------------------------------------- traces


def newest_segments(directory: str | Path, *, cap_bytes: int) -> tuple[list[Path], int]:
    """The newest flight-recorder segments whose sizes add up to at most ``cap_bytes``, oldest first, and how many
    older ones were left out. The first segment that would pass the cap ends the choice, so what is taken is one
    unbroken stretch of time up to now."""
    found = segments(directory)
    chosen: list[Path] = []
    total = 0
    for path in reversed(found):
        try:
            size = path.stat().st_size
        except OSError:  # rotated away meanwhile
            continue
        if total + size > cap_bytes:
            break
        chosen.append(path)
        total += size
    return chosen[::-1], len(found) - len(chosen)


# The simulated world binds its kubelet's unix socket in a directory of its own under TMPDIR
# (<TMPDIR>/gpu-watchdog-sim-XXXXXXXX/kubelet.sock), and a socket path may not pass 107 bytes (sun_path, unix(7)).
_SOCKET_ROOM = 107 - len("/gpu-watchdog-sim-XXXXXXXX/kubelet.sock")


@contextlib.contextmanager
def scratch_for_recording(work: Path, *, simulate: bool) -> Iterator[Path]:
    """The recording child's TMPDIR: inside ``work``; for a simulated node whose socket path would be too long
    there, a short directory of its own under /tmp, removed afterwards."""
    inside = work / "tmp"
    if not simulate or len(str(inside)) <= _SOCKET_ROOM:
        inside.mkdir()
        yield inside
        return
    try:
        short = Path(tempfile.mkdtemp(prefix="gpu-watchdog-bundle-", dir="/tmp"))
    except OSError:
        inside.mkdir()
        yield inside
        return
    try:
        yield short
    finally:
        shutil.rmtree(short, ignore_errors=True)


def record_fresh(*, out: Path, seconds: float, interval: float, config: str | None, policy: str | None,
                 simulate: str | None, log: Path, tmpdir: Path) -> int:
    """Run `gpu-watchdog record` for ``seconds`` (as fast as the simulation allows with ``simulate``); its output
    goes to ``log``. Returns its exit status. The child's temporary files stay under ``tmpdir``."""
    ticks = max(1, math.ceil(seconds / interval))
    command = [sys.executable, "-m", "watchdog.cli", "record", "--out", str(out), "--ticks", str(ticks)]
    if config:
        command += ["--config", config]
    env = dict(os.environ, TMPDIR=str(tmpdir),
               # Environment overrides (docs: settings precedence) keep the recorder from doubling the running
               # agent: no shared port, no second writer in the flight directory, no MQTT events, no audit lines.
               GPU_WATCHDOG_PUBLISHING__HOST="127.0.0.1", GPU_WATCHDOG_PUBLISHING__PORT="0",
               GPU_WATCHDOG_FLIGHT_RECORDER__ENABLED="false", GPU_WATCHDOG_MQTT__ENABLED="false",
               GPU_WATCHDOG_AUDIT_LOG="-")
    if policy:
        env["GPU_WATCHDOG_POLICY_FILE"] = policy
    if simulate:
        command += ["--simulate", simulate, "--fast"]
    with log.open("wb") as output:
        try:
            done = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                  env=env, timeout=2 * seconds + 120)
        except subprocess.TimeoutExpired:
            output.write(b"\n[gpu-watchdog bundle: the recording did not finish in time and was stopped]\n")
            return 124
    return done.returncode


# ----------------------------------------------------------------------------------------------- agent


def agent_metrics_url(settings: Settings, flag: str | None) -> str:
    """``--agent-url`` (its /metrics), else the settings' publishing address on this host."""
    if flag:
        base = flag.rstrip("/")
        return base if base.endswith("/metrics") else f"{base}/metrics"
    host = settings.publishing.host
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    if settings.publishing.port == 0:
        raise ValueError("the settings' publishing.port is 0 (any free port): pass --agent-url")
    return f"http://{f'[{host}]' if ':' in host else host}:{settings.publishing.port}/metrics"


def scrape(url: str, *, timeout: float = 10.0) -> bytes:
    """One plain-text scrape (no gzip asked), at most METRICS_CAP bytes."""
    request = urllib.request.Request(url, headers={"Accept": "text/plain"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read(METRICS_CAP)


# ----------------------------------------------------------------------------------------------- versions


def versions(*, node: str, probe_report: dict[str, Any] | None, metrics: bytes | None) -> str:
    """One "name: value" line per layer, from this command up to the kernel."""
    lines = [f"node: {node}", f"gpu-watchdog (this command): {__version__}",
             f"python: {platform.python_implementation()} {platform.python_version()}"]
    try:
        lines.append(f"nvidia-ml-py: {importlib.metadata.version('nvidia-ml-py')}")
    except importlib.metadata.PackageNotFoundError:
        lines.append("nvidia-ml-py: not installed")
    for key, answer in sorted((probe_report or {}).items()):
        if key.startswith("nvmlSystemGet") and isinstance(answer, dict):  # driver, and NVML/CUDA where probed
            shown = answer.get("value") if answer.get("supported") else f"unavailable ({answer.get('error')})"
            lines.append(f"{key.removeprefix('nvmlSystemGet')} (probe): {shown}")
    if probe_report is not None and not (probe_report.get("nvmlInit") or {}).get("supported"):
        lines.append(f"NVML (probe): nvmlInit failed ({(probe_report.get('nvmlInit') or {}).get('error')})")
    found = _BUILD_INFO.search((metrics or b"").decode("utf-8", "replace"))
    if found:
        labels = dict(_LABEL.findall(found.group(1)))
        lines.append("running agent (its gpu_watchdog_build_info): "
                     + ", ".join(f"{key}={labels[key]}" for key in ("version", "python", "driver_version")
                                 if key in labels))
    lines.append(f"kernel: {platform.release()} ({platform.machine()})")
    try:
        lines.append(f"os: {platform.freedesktop_os_release().get('PRETTY_NAME', '?')}")
    except OSError:
        lines.append(f"os: {platform.system()} (no os-release file)")
    return "\n".join(lines) + "\n"
