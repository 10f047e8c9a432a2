"""The flight recorder: the agent's last hours of ticks on the node's disk, as rotating version-2 trace segments.

When something went wrong on a node, the operator copies the segments out (``kubectl cp``) and replays them with
another policy (docs/flight-recorder.md). On the node the recorder must never hurt the agent: it is a TickSink
whose every disk error (full disk, directory deleted, read-only volume) is caught, counted as a dropped tick and
retried on the next tick in a fresh segment; nothing it holds grows without bound — segments rotate by size and
time, and the oldest are deleted first, past ``max_bytes`` or ``max_age_seconds``.

A segment is a complete trace (its own header, a full attribution on its first line), named by the timestamp of
its first tick in milliseconds so that names sort in time order. Its header names the policy in force, so a
reloaded policy ends the segment under way: the next tick begins a new one whose header names the new policy, and
every segment is replayed under the one policy its ticks ran under. A crash leaves the last segment without its
gzip trailer or with a torn line; the reader keeps what came before (watchdog.trace.io).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from watchdog.config.flight_recorder import FlightRecorderSettings
from watchdog.config.runtime import RuntimePolicy
from watchdog.model import TickResult
from watchdog.trace.io import TraceHeader, TraceWriter, policy_json

log = logging.getLogger(__name__)

PREFIX = "flight-"


def segment_name(started: float, *, compress: bool) -> str:
    return f"{PREFIX}{max(0, round(started * 1000)):016d}.jsonl{'.gz' if compress else ''}"


def segment_start(path: Path) -> float | None:
    digits = path.name[len(PREFIX):].split(".", 1)[0]
    return int(digits) / 1000 if path.name.startswith(PREFIX) and digits.isdigit() else None


def segments(directory: str | Path) -> list[Path]:
    """The recorder's segments in ``directory``, oldest first (an absent directory has none)."""
    try:
        found = [path for path in Path(directory).iterdir() if segment_start(path) is not None]
    except OSError:
        return []
    return sorted(found, key=lambda path: path.name)


class FlightRecorder:
    """A TickSink writing each tick to the current segment; see the module docstring."""

    stage = "flight_recorder"

    def __init__(self, settings: FlightRecorderSettings, *, tick_seconds: float, source: str = "agent") -> None:
        self.settings = settings
        self.directory = Path(settings.directory)
        self.tick_seconds = tick_seconds
        self.source = source
        self._writer: TraceWriter | None = None
        self._path: Path | None = None
        self._started = 0.0
        self._counted = 0  # bytes of the current segment already in bytes_written
        self.bytes_written = 0  # bytes that reached the disk (compressed when compress is on)
        self.ticks_written = 0
        self.dropped = 0  # ticks not recorded because of a disk error
        self.deleted = 0  # segments deleted by rotation
        self._failing = False
        self._policy: dict[str, Any] | None = None  # policy_json of the policy in force; None: never told one

    def apply_runtime(self, runtime: RuntimePolicy) -> None:
        """A policy load (the first one included): a changed policy ends the current segment at the next tick."""
        policy = policy_json(runtime.policy)
        if policy != self._policy:
            self._policy = policy

    def counters(self) -> dict[str, int]:
        """bytes_written, ticks_written, dropped, deleted and segments (on disk now) for the metrics."""
        return {"bytes_written": self.bytes_written, "ticks_written": self.ticks_written, "dropped": self.dropped,
                "deleted": self.deleted, "segments": len(segments(self.directory))}

    def tick_done(self, result: TickResult) -> None:
        sample, attribution = result.sample, result.attribution
        if sample is None or attribution is None:
            return
        try:
            self._rotate_if_due(sample.timestamp, node=sample.node)
            self._writer.write(sample, attribution, result.signals or None,
                               borrowed_activity=result.activity or None)
            self._account()
            self.ticks_written += 1
            if self._failing:
                log.info("flight recorder: writing again to %s", self._path)
                self._failing = False
        except OSError as exc:
            self.dropped += 1
            if not self._failing:  # one warning per failure streak, not one per tick
                log.warning("flight recorder: tick %d not recorded (%s); retrying in a new segment", sample.tick, exc)
                self._failing = True
            self._abandon()

    def _account(self, size: int | None = None) -> None:
        """Add what reached the disk since the last call to bytes_written."""
        size = self._size() if size is None else size
        self.bytes_written += max(0, size - self._counted)
        self._counted = size

    def _size(self) -> int:
        return self._writer.size_on_disk() if self._writer is not None else 0

    def _rotate_if_due(self, now: float, *, node: str) -> None:
        settings = self.settings
        if self._writer is not None and not self._path.exists():
            # Deleted under us (the directory or the file): writes to the open descriptor would succeed and be
            # lost with it, so begin a new segment where the operator will look.
            log.warning("flight recorder: %s was deleted; beginning a new segment", self._path)
            self._abandon()
        if self._writer is not None and self._writer.header.policy is not self._policy:
            log.info("flight recorder: the policy changed; beginning a new segment")
            self.close()
        if self._writer is not None and (self._size() >= settings.segment_bytes
                                         or now - self._started >= settings.segment_seconds):
            self.close()
        if self._writer is None:
            self.directory.mkdir(parents=True, exist_ok=True)  # again after the directory was deleted
            self._path = self.directory / segment_name(now, compress=settings.compress)
            self._started = now
            header = TraceHeader(node=node, tick_seconds=self.tick_seconds, started=now, source=self.source,
                                 policy=self._policy)
            try:
                self._writer = TraceWriter(self._path, header=header)
            except OSError:
                self._path.unlink(missing_ok=True)  # not even the header fitted: leave no husk
                raise
            self._counted = 0
            self._account()
            self._prune(now)

    def _prune(self, now: float) -> None:
        """Delete the oldest segments while the total passes max_bytes or a segment's ticks are all too old."""
        found = [path for path in segments(self.directory) if path != self._path]
        sizes = {}
        for path in found:
            try:
                sizes[path] = path.stat().st_size
            except OSError:
                sizes[path] = 0
        total = sum(sizes.values())
        for index, path in enumerate(found):
            following = found[index + 1] if index + 1 < len(found) else self._path
            too_old = now - (segment_start(following) or now) > self.settings.max_age_seconds
            if total + self.settings.segment_bytes <= self.settings.max_bytes and not too_old:
                break
            try:
                path.unlink()
                self.deleted += 1
            except FileNotFoundError:
                pass
            total -= sizes[path]

    def _abandon(self) -> None:
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            writer.close()
        except OSError:
            pass  # the segment keeps what reached the disk; the reader stops at its torn end
        if writer.ticks_written == 0 and self._path is not None:
            self._path.unlink(missing_ok=True)  # a header alone (or part of one) is no trace: leave no husk

    def close(self) -> None:
        """Close the current segment (on rotation and at shutdown); a disk error here is counted, never raised."""
        try:
            if self._writer is not None:
                self._writer.close()
                self._account(self._path.stat().st_size)  # the gzip trailer
        except OSError as exc:
            log.warning("flight recorder: closing %s failed (%s)", self._path, exc)
        finally:
            self._writer = None
