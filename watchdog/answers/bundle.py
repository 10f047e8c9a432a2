"""`gpu-watchdog bundle --out F.tar.gz`: the one file a user attaches to a bug report from a node.

A report that says "it evicted the wrong pod" is answerable only with what the node saw and how the agent was set
up; asking for each piece in turn costs days. The bundle gathers them in one go (watchdog.answers.bundle_sources
says where each comes from), lists them in MANIFEST.txt, and writes every part it could not get as a line of
NOTES.txt instead of failing: a bundle from a broken node is the one most needed.

What it must never carry: secrets (settings are redacted, files holding secrets are named, never read), and
anything of other tenants beyond what the agent already exports (its metrics and traces). Everything is staged in
a temporary directory that is removed however the command ends, and the archive appears under its name only once
complete (written beside it, then renamed), readable by its owner only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator

from watchdog.answers import bundle_sources as sources
from watchdog.config import ConfigError, Settings, load_settings

MIB = 1024 * 1024
FLIGHT_CAP = 50 * MIB
"""At most this many bytes of flight-recorder segments, the newest (docs/flight-recorder.md: a tick's size)."""
LOG_CAP = 20 * MIB
"""At most the last this many bytes of each --log file."""
LOG_HINT = ("The agent logs to its container's stderr only, and its HTTP API has no recent-log endpoint. To add "
            "the log: kubectl logs -n gpu-watchdog <agent pod on this node> > agent.log (and --previous for the "
            "container before a restart), then run the bundle again with --log agent.log.")


@dataclass(frozen=True)
class BundleRequest:
    out: str
    config: str | None = None
    policy: str | None = None
    agent_url: str | None = None
    logs: tuple[str, ...] = ()
    record_seconds: float = 60.0
    simulate: str | None = None


@dataclass
class Staging:
    """The bundle's files under ``root``, each with the source MANIFEST.txt names, and the notes."""

    root: Path
    entries: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, name: str, data: bytes | str, *, source: str) -> None:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        self.entries.append((name, source))

    def add_file(self, name: str, original: Path, *, source: str, tail: int | None = None) -> None:
        """A copy of ``original`` (its last ``tail`` bytes when given); a file that vanished is noted."""
        try:
            with original.open("rb") as stream:
                if tail is not None and stream.seek(0, os.SEEK_END) > tail:
                    stream.seek(-tail, os.SEEK_END)
                    source += f", its last {tail // MIB} MiB"
                else:
                    stream.seek(0)
                self.add(name, stream.read(), source=source)
        except OSError as exc:
            self.note(f"{original}: not included ({exc.strerror or exc})")

    def note(self, text: str) -> None:
        self.notes.append(text)

    def finish(self) -> None:
        if self.notes:
            self.add("NOTES.txt", "".join(f"- {note}\n" for note in self.notes),
                     source="this command: what could not be gathered, and how to add it")
        rows = [(str((self.root / name).stat().st_size), name, source) for name, source in self.entries]
        width = max(len(name) for _, name, _ in rows)
        (self.root / "MANIFEST.txt").write_text(
            "gpu-watchdog support bundle: each file, its size in bytes and where it came from\n\n"
            + "".join(f"{size:>10}  {name.ljust(width)}  {source}\n" for size, name, source in rows))


def _settings(request: BundleRequest, staging: Staging) -> Settings:
    flags = {"policy_file": request.policy} if request.policy else {}
    try:
        return load_settings(request.config, flags=flags)
    except ConfigError as exc:
        staging.note(f"the settings do not validate, so the defaults are shown: {exc}")
        return Settings.model_validate(flags)


def _probe(request: BundleRequest, settings: Settings, staging: Staging) -> dict | None:
    """`gpu-watchdog probe` in this process, its JSON and its table (None when it could not run)."""
    from watchdog.sampling.probe_table import render_table
    from watchdog.service.node_probe import probe_node

    node, sleep = None, time.sleep
    try:
        if request.simulate:
            from watchdog.testbed import SimClock, SimulatedGpuNode

            clock = SimClock(1.0)
            node = SimulatedGpuNode.from_scenario(request.simulate, clock)
            nvml, sleep = node.nvml, clock.advance  # GPM's two samples apart in simulated time, as `probe` does
        else:
            from watchdog.sampling.nvml_library import load

            nvml = load()
        report = probe_node(nvml, kubelet_socket=settings.attribution.kubelet_socket,
                            proc_root=settings.attribution.proc_root, sleep=sleep)
    except Exception as exc:  # a bundle from a node whose NVML is broken is the one most needed
        staging.note(f"probe: not run ({type(exc).__name__}: {exc})")
        return None
    finally:
        if node is not None:
            node.close()
    where = f"simulated node {request.simulate}" if request.simulate else "NVML and this host"
    staging.add("probe.json", sources.to_json(report), source=f"gpu-watchdog probe --json, of {where}")
    staging.add("probe.txt", render_table(report), source=f"gpu-watchdog probe (its table), of {where}")
    return report


def _traces(request: BundleRequest, settings: Settings, staging: Staging, work: Path) -> None:
    recorder = settings.flight_recorder
    chosen, older = sources.newest_segments(recorder.directory, cap_bytes=FLIGHT_CAP)
    if chosen:
        for path in chosen:
            staging.add_file(f"flight/{path.name}", path, source=f"flight recorder, {path}")
        if older:
            staging.note(f"flight recorder: {older} older segment(s) in {recorder.directory} left out "
                         f"(the bundle takes the newest up to {FLIGHT_CAP // MIB} MiB)")
        if not recorder.enabled:
            staging.note(f"flight recorder: off in these settings; the segments in {recorder.directory} may be "
                         "from an earlier run")
        return
    why = "off" if not recorder.enabled else f"on but {recorder.directory} holds no segment"
    if request.record_seconds <= 0:
        staging.note(f"flight recorder {why}, and the fresh recording was skipped (--record-seconds 0)")
        return
    trace, log = work / "trace.jsonl.gz", work / "record.log"
    interval = settings.sampling.interval_seconds
    if request.simulate:  # the simulated world ticks at its scenario's pace (testbed.world.settings)
        from watchdog.testbed.scenario import load_scenario

        interval = load_scenario(request.simulate).tick_seconds
    with sources.scratch_for_recording(work, simulate=bool(request.simulate)) as scratch:
        status = sources.record_fresh(out=trace, seconds=request.record_seconds, interval=interval,
                                      config=request.config, policy=request.policy, simulate=request.simulate,
                                      log=log, tmpdir=scratch)
    what = f"gpu-watchdog record, {request.record_seconds:g} s in observe mode (the flight recorder was {why})"
    if trace.exists() and trace.stat().st_size:
        staging.add_file("recording/trace.jsonl.gz", trace, source=what)
    staging.add_file("recording/record.log", log, source=f"output of {what}")
    if status != 0:
        staging.note(f"the fresh recording failed (exit {status}); see recording/record.log")


def _agent(request: BundleRequest, settings: Settings, staging: Staging) -> bytes | None:
    try:
        url = sources.agent_metrics_url(settings, request.agent_url)
    except ValueError as exc:
        staging.note(f"the running agent was not scraped: {exc}")
        return None
    try:
        body = sources.scrape(url)
    except OSError as exc:
        staging.note(f"the running agent could not be scraped at {url} ({exc}); pass --agent-url if it listens "
                     "elsewhere")
        return None
    staging.add("metrics.txt", body, source=f"one scrape of the running agent, {url}")
    return body


def collect(request: BundleRequest, staging: Staging, work: Path) -> None:
    """Every part of the bundle into ``staging``; ``work`` is scratch space removed with it."""
    settings = _settings(request, staging)
    source = f"--config {request.config}" if request.config else "defaults"
    staging.add("settings.json", sources.to_json(sources.effective_settings(settings)),
                source=f"effective settings ({source}, GPU_WATCHDOG_* environment, flags), secrets redacted")
    try:
        policy = sources.effective_policy(settings)
        staging.add("policy.json", sources.to_json(policy),
                    source=f"effective policy ({policy['source']}) as the agent resolves it, secrets redacted")
    except (ConfigError, OSError) as exc:
        staging.note(f"policy: not included ({exc})")
    report = _probe(request, settings, staging)
    metrics = _agent(request, settings, staging)
    _traces(request, settings, staging, work)
    for index, log in enumerate(request.logs):
        path = Path(log)
        staging.add_file(f"logs/{index}-{path.name}", path, source=f"--log {log}", tail=LOG_CAP)
    if not request.logs:
        staging.note(LOG_HINT)
    node = settings.node_name or os.environ.get("NODE_NAME") or socket.gethostname()
    staging.add("versions.txt", sources.versions(node=node, probe_report=report, metrics=metrics),
                source="this command, its Python environment, the probe, the agent's build_info, uname and "
                       "/etc/os-release")
    staging.finish()


def _reserve(out: Path) -> tuple[int, Path]:
    """Open the archive's temporary name beside ``out`` now, so an unwritable --out fails before any work."""
    if out.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a directory; --out names the archive file, e.g. bundle.tar.gz",
                                str(out))
    try:
        fd, partial = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".partial")
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write the bundle there ({exc.strerror})", str(out)) from None
    return fd, Path(partial)


def _archive(staging: Staging, stream: BinaryIO) -> None:
    def owned_by_nobody(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mode = 0o755 if info.isdir() else 0o644
        return info

    with tarfile.open(fileobj=stream, mode="w:gz") as archive:
        archive.add(staging.root, arcname=staging.root.name, filter=owned_by_nobody)
    stream.flush()
    os.fsync(stream.fileno())


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (a `kubectl exec` session closing) unwinds like Ctrl-C, so the temporary files still go."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def write_bundle(request: BundleRequest) -> tuple[Path, Staging]:
    """Gather, archive and rename into place; the staged files (and a half-written archive) never outlive it."""
    out = Path(request.out)
    for log in request.logs:  # a mistyped --log fails now, not after the recording
        with open(log, "rb"):
            pass
    with _terminate_as_interrupt():
        fd, partial = _reserve(out)
        try:
            with os.fdopen(fd, "wb") as stream, tempfile.TemporaryDirectory(prefix="gpu-watchdog-bundle-") as work:
                stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
                staging = Staging(Path(work) / f"gpu-watchdog-bundle-{stamp}")
                staging.root.mkdir()
                collect(request, staging, Path(work))
                _archive(staging, stream)
            os.replace(partial, out)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    return out, staging
