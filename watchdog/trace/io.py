"""Writes and reads trace files: JSON lines, a header first, one tick per line.

JSON lines because a trace is appended to while the agent runs (a crash loses at most the line being written, so
every line is flushed), and because a person can write one by hand to reproduce a report. Every line read is
checked against the one JSON Schema shipped in this package (``trace.schema.json``, Draft 2020-12) before it is
decoded, so a bad trace fails with the file, the line and the field at fault instead of deep inside detection.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import IO, Any, Iterator, Mapping

import jsonschema

from watchdog import __version__
from watchdog.model import Attribution, NodeSample
from watchdog.trace.codec import decode_tick, decode_tick_signals, encode_tick

TRACE_FORMAT = "gpu-watchdog-trace"
TRACE_VERSION = 1


class TraceError(ValueError):
    """A trace line that is not valid JSON, breaks the schema, or contradicts the lines before it."""

    def __init__(self, *, path: str, line: int, field: str, reason: str) -> None:
        super().__init__(f"{path}:{line}: {field}: {reason}")
        self.path, self.line, self.field, self.reason = path, line, field, reason


@dataclass(frozen=True, slots=True)
class TraceHeader:
    node: str
    tick_seconds: float
    started: float
    agent_version: str = __version__
    source: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": TRACE_FORMAT, "version": TRACE_VERSION, "node": self.node}
        out.update(tick_seconds=self.tick_seconds, started=self.started, agent_version=self.agent_version)
        if self.source is not None:
            out["source"] = self.source
        return out


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One decoded tick, with the line it came from (for messages that point back into the file)."""

    line: int
    sample: NodeSample
    attribution: Attribution
    external_signals: Mapping[str, float] | None = None  # None: the line recorded none

    @property
    def tick(self) -> int:
        return self.sample.tick


def schema() -> dict[str, Any]:
    """The trace JSON Schema (the single copy lives next to this module; docs/trace.schema.json links to it)."""
    return json.loads(resources.files("watchdog.trace").joinpath("trace.schema.json").read_text("utf-8"))


@cache
def _validator(definition: str) -> jsonschema.Draft202012Validator:
    full = schema()
    return jsonschema.Draft202012Validator({"$defs": full["$defs"], "$ref": f"#/$defs/{definition}"})


def _check(instance: Any, definition: str, *, path: str, line: int) -> None:
    error = jsonschema.exceptions.best_match(_validator(definition).iter_errors(instance))
    if error is not None:
        field = ".".join(str(part) for part in error.absolute_path) or "(line)"
        raise TraceError(path=path, line=line, field=field, reason=error.message)


class TraceWriter:
    """Appends ticks to a trace: the header at construction, then one flushed line per :meth:`write`.

    ``target`` is a path (opened, and closed by :meth:`close`) or an open text stream (left open).
    """

    def __init__(self, target: str | Path | IO[str], *, header: TraceHeader) -> None:
        if isinstance(target, (str, Path)):
            self._stream: IO[str] = open(target, "w", encoding="utf-8")
            self._owned = True
        else:
            self._stream, self._owned = target, False
        self.header = header
        self.ticks_written = 0
        self._emit(header.to_json())

    def _emit(self, data: dict[str, Any]) -> None:
        # allow_nan=False: the codec already turned non-finite readings into null; anything left is a bug.
        self._stream.write(json.dumps(data, allow_nan=False, separators=(",", ":")) + "\n")
        self._stream.flush()

    def write(
        self, sample: NodeSample, attribution: Attribution, external_signals: Mapping[str, float] | None = None
    ) -> None:
        self._emit(encode_tick(sample, attribution, external_signals))
        self.ticks_written += 1

    def close(self) -> None:
        if self._owned and not self._stream.closed:
            self._stream.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _NonFinite:
    """Stands in for a NaN/Infinity literal while a line is parsed, so the field holding it can be named."""

    def __init__(self, literal: str) -> None:
        self.literal = literal


def _non_finite_path(value: Any, path: tuple[str, ...] = ()) -> tuple[tuple[str, ...], str] | None:
    if isinstance(value, _NonFinite):
        return path, value.literal
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _non_finite_path(item, (*path, str(key)))
        if found is not None:
            return found
    return None


def _parse(text: str, *, path: str, line: int) -> Any:
    # Python's json accepts the non-standard literals NaN, Infinity and -Infinity (RFC 8259 §6 has no such
    # numbers). A trace holding one was not written by TraceWriter (allow_nan=False) and would feed detection a
    # value every comparison answers False to, so it is refused with the field that holds it.
    try:
        data = json.loads(text, parse_constant=_NonFinite)
    except json.JSONDecodeError as exc:
        reason = f"not valid JSON: {exc.msg} at column {exc.colno}"
        raise TraceError(path=path, line=line, field="(line)", reason=reason) from None
    found = _non_finite_path(data)
    if found is not None:
        where, literal = found
        reason = f"{literal} is not a JSON number (write null for a reading that is not available)"
        raise TraceError(path=path, line=line, field=".".join(where) or "(line)", reason=reason)
    return data


class Trace:
    """A trace file: its validated header, and its ticks when iterated (the file is re-read on each iteration)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.header = self._read_header()

    def _read_header(self) -> TraceHeader:
        name = str(self.path)
        with open(self.path, encoding="utf-8") as stream:
            first = stream.readline()
        if not first.strip():
            reason = "empty trace: the first line must be the header"
            raise TraceError(path=name, line=1, field="(line)", reason=reason)
        data = _parse(first, path=name, line=1)
        if isinstance(data, dict) and data.get("format") == TRACE_FORMAT and data.get("version") != TRACE_VERSION:
            reason = f"unsupported trace version {data.get('version')!r} (this reader knows {TRACE_VERSION})"
            raise TraceError(path=name, line=1, field="version", reason=reason)
        _check(data, "header", path=name, line=1)
        fields = {key: data[key] for key in ("node", "tick_seconds", "started", "agent_version")}
        return TraceHeader(**fields, source=data.get("source"))

    def __iter__(self) -> Iterator[TraceRecord]:
        name = str(self.path)
        previous: int | None = None
        with open(self.path, encoding="utf-8") as stream:
            stream.readline()
            for number, text in enumerate(stream, start=2):
                if not text.strip():
                    continue  # a blank line (e.g. a trailing newline pair) carries nothing
                data = _parse(text, path=name, line=number)
                _check(data, "tick", path=name, line=number)
                try:
                    sample, attribution = decode_tick(data, node=self.header.node)
                except ValueError as exc:
                    field, _, reason = str(exc).partition(": ")
                    raise TraceError(path=name, line=number, field=field, reason=reason) from None
                if previous is not None and sample.tick <= previous:
                    reason = f"{sample.tick} does not follow the previous {previous}"
                    raise TraceError(path=name, line=number, field="tick", reason=reason)
                previous = sample.tick
                yield TraceRecord(number, sample, attribution, decode_tick_signals(data))


def read_trace(path: str | Path) -> Trace:
    """Open a trace: the header is read and checked now, each tick line as iteration reaches it.

    Raises :class:`TraceError` ("FILE:LINE: field.path: reason") on the first bad line, ``OSError`` when the
    file cannot be read.
    """
    return Trace(path)
