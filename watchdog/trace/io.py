"""Writes and reads trace files: JSON lines, a header first, one tick per line, plain or gzip.

JSON lines because a trace is appended to while the agent runs (a crash loses at most the line being written, so
every line is flushed), and because a person can write one by hand to reproduce a report. A path ending in
``.gz`` is gzip, written and read transparently: each flush is a zlib sync flush, so a file cut short by a crash
still reads up to its last whole line. Every line read is checked against the one JSON Schema shipped in this
package (``trace.schema.json``) before it is decoded (:mod:`watchdog.trace.parsing`), so a bad trace fails with
the file, the line and the field at fault instead of deep inside detection. The writer writes version 2
(:mod:`watchdog.trace.compact`); the reader reads versions 1 and 2.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator, Mapping

from watchdog import __version__
from watchdog.config.policy import Policy
from watchdog.model import Attribution, InstanceActivity, NodeSample
from watchdog.model.plausibility import PlausibilityGate
from watchdog.trace.codec import (decode_attribution, decode_tick, decode_tick_activity, decode_tick_signals,
                                  encode_tick)
from watchdog.trace.compact import compact_attribution, compact_sample
from watchdog.trace.parsing import TraceError, check, load_line, parse, schema

__all__ = ["TRACE_FORMAT", "TRACE_VERSION", "READ_VERSIONS", "Trace", "TraceError", "TraceHeader", "TraceRecord",
           "TraceWriter", "policy_json", "read_trace", "schema", "open_text"]

log = logging.getLogger(__name__)

TRACE_FORMAT = "gpu-watchdog-trace"
TRACE_VERSION = 2
READ_VERSIONS = (1, 2)
_NOBODY = decode_attribution({"healthy": False})  # encoded in place of an attribution the line will not carry


def open_text(path: str | Path, mode: str) -> IO[Any]:
    """``open`` for a trace path: gzip when the name ends in ``.gz``. ``mode`` is "w", "a" or "rb"."""
    if str(path).endswith(".gz"):
        if mode == "rb":
            return gzip.open(path, "rb")
        return gzip.open(path, mode + "t", encoding="utf-8", compresslevel=6)
    if mode == "rb":
        return open(path, "rb")
    return open(path, mode, encoding="utf-8")


def policy_json(policy: Policy) -> dict[str, Any]:
    """A policy as a header records it: every field, in the shape of a policy file, so that a replay applies the
    values the agent applied even after a later version changed a default."""
    return policy.model_dump(mode="json")


@dataclass(frozen=True, slots=True)
class TraceHeader:
    node: str
    tick_seconds: float
    started: float
    agent_version: str = __version__
    source: str | None = None
    version: int = TRACE_VERSION
    # The policy in force when the trace (or segment) began, as policy_json wrote it; None: not recorded. Kept as
    # JSON here and validated by the replay that applies it, so a reader given --policy never depends on it.
    policy: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": TRACE_FORMAT, "version": self.version, "node": self.node}
        out.update(tick_seconds=self.tick_seconds, started=self.started, agent_version=self.agent_version)
        if self.source is not None:
            out["source"] = self.source
        if self.policy is not None:
            out["policy"] = dict(self.policy)
        return out


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One decoded tick, with the line it came from (for messages that point back into the file)."""

    line: int
    sample: NodeSample
    attribution: Attribution
    external_signals: Mapping[str, float] | None = None  # None: the line recorded none
    borrowed_activity: Mapping[str, InstanceActivity] | None = None  # None: the line recorded none

    @property
    def tick(self) -> int:
        return self.sample.tick


class TraceWriter:
    """Appends ticks to a trace: the header at construction, then one flushed line per :meth:`write`.

    ``target`` is a path (opened — gzip when it ends in ``.gz`` — and closed by :meth:`close`) or an open text
    stream (left open). ``header.version`` chooses the format: 2 (compact, the default) or 1 (every field on every
    line, for a reader that only knows version 1). ``bytes_written`` counts the text handed to the stream.
    """

    def __init__(self, target: str | Path | IO[str], *, header: TraceHeader) -> None:
        if header.version not in READ_VERSIONS:
            raise ValueError(f"version: cannot write trace version {header.version}")
        if isinstance(target, (str, Path)):
            self._stream: IO[str] = open_text(target, "w")
            self._owned = True
        else:
            self._stream, self._owned = target, False
        self.header = header
        self.ticks_written = 0
        self.bytes_written = 0
        self._attribution: dict[str, Any] | None = None  # the last attribution written in full (version 2)
        self._attribution_tick = -1
        self._last_timestamp: float | None = None
        self._attribution_object: Attribution | None = None  # the Attribution last written (or referred to)
        self._emit(header.to_json())

    def _emit(self, data: dict[str, Any]) -> None:
        # allow_nan=False: the codec already turned non-finite readings into null; anything left is a bug.
        text = json.dumps(data, allow_nan=False, separators=(",", ":")) + "\n"
        self._stream.write(text)
        self._stream.flush()
        self.bytes_written += len(text)

    def write(
        self,
        sample: NodeSample,
        attribution: Attribution,
        external_signals: Mapping[str, float] | None = None,
        *,
        borrowed_activity: Mapping[str, InstanceActivity] | None = None,
    ) -> None:
        # Equal objects encode equally, and comparing them costs ~1 % of encoding 56 pods: skip the encoding.
        same = self.header.version == 2 and attribution == self._attribution_object
        line = encode_tick(sample, _NOBODY if same else attribution, external_signals,
                           borrowed_activity=borrowed_activity)
        if self.header.version == 2:
            line["sample"] = compact_sample(line["sample"], node=self.header.node, tick=line["tick"],
                                            timestamp=line["timestamp"])
            full = None if same else compact_attribution(line["attribution"])
            if same or full == self._attribution:
                del line["attribution"]
                line["attribution_from"] = self._attribution_tick
            else:
                line["attribution"], self._attribution, self._attribution_tick = full, full, sample.tick
            self._attribution_object = attribution
        if self._last_timestamp is not None and sample.timestamp < self._last_timestamp:
            # The wall clock stepped back (NTP, a VM resumed): said on the line, so a reader can tell it from a
            # recording edited out of order. The agent's guarantees ran on its monotonic clock throughout.
            line["clock_step"] = sample.timestamp - self._last_timestamp
        self._last_timestamp = sample.timestamp
        self._emit(line)
        self.ticks_written += 1

    def size_on_disk(self) -> int:
        """Bytes of the file written so far (compressed for gzip: each flush reaches the disk); 0 for a stream."""
        return os.fstat(self._stream.fileno()).st_size if self._owned else 0

    def close(self) -> None:
        if self._owned and not self._stream.closed:
            self._stream.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Trace:
    """A trace file: its validated header, and its ticks when iterated (the file is re-read on each iteration).

    A last line cut short by a crash (no newline, not valid JSON — or a gzip stream that ends early) ends the
    iteration with a warning and sets ``torn_line``; everything before it is delivered. A bad line anywhere else
    is a TraceError.

    Every decoded sample passes a plausibility gate, as the live sampler's did, so a reading edited to an
    impossible value is refused on replay exactly as live. ``gate`` is shared by several traces read in a row
    (the segments of one recording); without one, each iteration starts a gate of its own.
    """

    def __init__(self, path: str | Path, *, gate: PlausibilityGate | None = None) -> None:
        self.path = Path(path)
        self.gate = gate
        self.torn_line: int | None = None
        self.header = self._read_header()

    def _read_header(self) -> TraceHeader:
        name = str(self.path)
        with open_text(self.path, "rb") as stream:
            try:
                first = stream.readline()
            except (EOFError, gzip.BadGzipFile) as exc:
                raise TraceError(path=name, line=1, field="(line)", reason=f"not a readable gzip file: {exc}") from None
        if not first.strip():
            reason = "empty trace: the first line must be the header"
            raise TraceError(path=name, line=1, field="(line)", reason=reason)
        data = parse(first, path=name, line=1)
        if isinstance(data, dict) and data.get("format") == TRACE_FORMAT and data.get("version") not in READ_VERSIONS:
            known = " and ".join(str(version) for version in READ_VERSIONS)
            reason = f"unsupported trace version {data.get('version')!r} (this reader knows {known})"
            raise TraceError(path=name, line=1, field="version", reason=reason)
        check(data, "header", path=name, line=1)
        fields = {key: data[key] for key in ("node", "tick_seconds", "started", "agent_version")}
        return TraceHeader(**fields, source=data.get("source"), version=data["version"], policy=data.get("policy"))

    def _lines(self) -> Iterator[tuple[int, bytes]]:
        """(line number, raw line) after the header. A gzip stream cut short (a crash before the writer closed
        it) ends with a warning after its last whole line; a corrupt one is a TraceError."""
        name = str(self.path)
        with open(self.path, "rb") as file, (gzip.GzipFile(fileobj=file) if name.endswith(".gz") else file) as stream:
            self._file = file
            number = 1
            try:
                stream.readline()
                for number, raw in enumerate(stream, start=2):
                    yield number, raw
            except EOFError:
                self.torn_line = number + 1
                log.warning("%s:%d: the compressed stream ends early (the writer stopped); keeping the lines before",
                            name, number + 1)
            except (gzip.BadGzipFile, zlib.error) as exc:
                raise TraceError(path=name, line=number + 1, field="(line)", reason=f"corrupt gzip data: {exc}") from None

    def bytes_read(self) -> int:
        """How far the current iteration is into the file, in bytes on disk (compressed for gzip): progress."""
        file = getattr(self, "_file", None)
        return file.tell() if file is not None and not file.closed else 0

    def __iter__(self) -> Iterator[TraceRecord]:
        name, version = str(self.path), self.header.version
        gate = self.gate if self.gate is not None else PlausibilityGate()
        previous: int | None = None
        last_time: float | None = None
        attribution: tuple[int, Attribution] | None = None  # (tick, decoded) of the last full attribution
        for number, raw in self._lines():
            if not raw.strip():
                continue  # a blank line (e.g. a trailing newline pair) carries nothing
            try:
                data = load_line(raw, "tick", path=name, line=number)
            except TraceError as exc:
                if raw.endswith(b"\n") or not exc.reason.startswith("not valid JSON"):
                    raise
                self.torn_line = number  # the writer died mid-line: what came before stands
                log.warning("%s:%d: torn last line (the writer stopped mid-line); keeping the ticks before it",
                            name, number)
                return
            if ("attribution" in data) == ("attribution_from" in data):
                reason = "a tick line holds either attribution or (version 2) attribution_from, not both or neither"
                raise TraceError(path=name, line=number, field="attribution", reason=reason)
            if "attribution_from" in data:
                if version < 2:
                    raise TraceError(path=name, line=number, field="attribution_from", reason="not in version 1")
                if attribution is None or attribution[0] != data["attribution_from"]:
                    held = "no earlier line" if attribution is None else f"tick {attribution[0]}"
                    reason = f"refers to tick {data['attribution_from']}, but the last full attribution is {held}"
                    raise TraceError(path=name, line=number, field="attribution_from", reason=reason)
                data["attribution"] = {}  # decoded below for the sample's checks; replaced by the held one
            try:
                sample, decoded = decode_tick(data, node=self.header.node)
            except ValueError as exc:
                field, _, reason = str(exc).partition(": ")
                raise TraceError(path=name, line=number, field=field, reason=reason) from None
            if "attribution_from" in data:
                decoded = attribution[1]
            else:
                attribution = (sample.tick, decoded)
            if previous is not None and sample.tick <= previous:
                reason = f"{sample.tick} does not follow the previous {previous}"
                raise TraceError(path=name, line=number, field="tick", reason=reason)
            if last_time is not None and sample.timestamp < last_time and \
                    not _declared_step(data.get("clock_step"), sample.timestamp - last_time):
                # The agent stamps ticks with the wall clock and marks a step back it saw (`clock_step`); an
                # unmarked one is no recording it wrote in order.
                reason = f"{sample.timestamp!r} goes backwards from the previous tick's {last_time!r}"
                raise TraceError(path=name, line=number, field="timestamp", reason=reason)
            previous, last_time = sample.tick, sample.timestamp
            yield TraceRecord(number, gate.admit(sample), decoded, decode_tick_signals(data),
                              decode_tick_activity(data))


def read_trace(path: str | Path, *, gate: PlausibilityGate | None = None) -> Trace:
    """Open a trace (plain or ``.gz``): the header is read and checked now, each tick line as iteration reaches it.
    Each sample passes ``gate`` (one of the trace's own when None): see :class:`Trace`.

    Raises :class:`TraceError` ("FILE:LINE: field.path: reason") on the first bad line, ``OSError`` when the
    file cannot be read.
    """
    return Trace(path, gate=gate)


def _declared_step(declared: object, step: float) -> bool:
    """The line's own `clock_step` accounts for the step back its timestamp takes."""
    return isinstance(declared, (int, float)) and abs(float(declared) - step) <= 1e-6 * max(1.0, abs(step))
