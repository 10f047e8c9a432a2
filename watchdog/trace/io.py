"""Writes and reads trace files: JSON lines, a header first, one tick per line.

JSON lines because a trace is appended to while the agent runs (a crash loses at most the line being written, so
every line is flushed), and because a person can write one by hand to reproduce a report. Every line read is
checked against the one JSON Schema shipped in this package (``trace.schema.json``, Draft 2020-12) before it is
decoded, so a bad trace fails with the file, the line and the field at fault instead of deep inside detection.
"""

from __future__ import annotations

import json
import math
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


# Far beyond the deepest line TraceWriter writes (about six levels), far below Python's recursion limit: json
# itself recurses once per level and ends in RecursionError on a line nested some thousand levels deep.
MAX_DEPTH = 64
# No recorded integer (a tick, bytes, a pid) comes near this; CPython refuses to convert more than 4,300 digits
# (sys.set_int_max_str_digits) with a ValueError that would not name the field.
MAX_INTEGER_DIGITS = 100


class _Refused:
    """Stands in for a number the trace may not hold while a line is parsed, so the field holding it can be named."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _constant(literal: str) -> _Refused:
    # Python's json accepts the non-standard literals NaN, Infinity and -Infinity (RFC 8259 §6 has no such
    # numbers). A trace holding one was not written by TraceWriter (allow_nan=False) and would feed detection a
    # value every comparison answers False to.
    return _Refused(f"{literal} is not a JSON number (write null for a reading that is not available)")


def _float(text: str) -> float | _Refused:
    value = float(text)  # "1e400" overflows to inf: RFC 8259 §6 leaves the range to the implementation
    return value if math.isfinite(value) else _Refused(f"{text} is not a finite number")


def _int(text: str) -> int | _Refused:
    digits = len(text.lstrip("-"))
    if digits > MAX_INTEGER_DIGITS:
        return _Refused(f"an integer of {digits} digits is too large")
    return int(text)


def _first_refusal(value: Any) -> tuple[str, str] | None:
    """(field path, reason) of the first refused number or of nesting deeper than MAX_DEPTH; None when clean.
    Iterative, so that no line can make it recurse."""
    stack: list[tuple[Any, tuple[str, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, _Refused):
            return ".".join(path) or "(line)", item.reason
        children = list(item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ())
        if children and len(path) >= MAX_DEPTH:
            return "(line)", f"nested deeper than {MAX_DEPTH} levels"
        stack.extend((child, (*path, str(key))) for key, child in reversed(children))
    return None


def _parse(raw: bytes, *, path: str, line: int) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        reason = f"not UTF-8 text: {exc.reason} at byte {exc.start}"
        raise TraceError(path=path, line=line, field="(line)", reason=reason) from None
    try:
        data = json.loads(text, parse_constant=_constant, parse_float=_float, parse_int=_int)
    except json.JSONDecodeError as exc:
        reason = f"not valid JSON: {exc.msg} at column {exc.colno}"
        raise TraceError(path=path, line=line, field="(line)", reason=reason) from None
    except RecursionError:
        reason = f"nested deeper than {MAX_DEPTH} levels"
        raise TraceError(path=path, line=line, field="(line)", reason=reason) from None
    found = _first_refusal(data)
    if found is not None:
        field, reason = found
        raise TraceError(path=path, line=line, field=field, reason=reason)
    return data


class Trace:
    """A trace file: its validated header, and its ticks when iterated (the file is re-read on each iteration)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.header = self._read_header()

    def _read_header(self) -> TraceHeader:
        name = str(self.path)
        with open(self.path, "rb") as stream:
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
        with open(self.path, "rb") as stream:
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
