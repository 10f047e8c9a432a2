"""Turns one raw trace line into checked JSON data, fast when the line is good and precise when it is not.

Replaying a day of a dense node is some 86,400 lines of 5–30 KB each, so the common case (a good line) takes the
fast path: ``msgspec`` parses (it refuses NaN, Infinity and numbers that overflow a double, RFC 8259 §6, and keeps
integers exact at any size — orjson, as fast, reads 99999999999999999999999 as the float 1e23) and a validator
compiled once by ``fastjsonschema`` checks the line against ``trace.schema.json``, every number bounded to
MAX_INTEGER_DIGITS. A line the fast path refuses goes through the precise path: Python's ``json`` with hooks that
name a refused number's field, and ``jsonschema``'s best match for the message. So the verdict is the schema's
either way, and the message of a bad line is the same as ever: ``FILE:LINE: field.path: reason``. Without the
optional ``replay`` extra (msgspec, fastjsonschema) every line takes the precise path; bench/bench_trace.py
measures both, and the other parsers and validators.
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import jsonschema

try:  # the ``replay`` extra; the agent itself never needs it
    import fastjsonschema
    import msgspec
except ImportError:  # pragma: no cover - the precise path alone is tested by setting FAST to False
    fastjsonschema = msgspec = None

FAST = fastjsonschema is not None and msgspec is not None


class TraceError(ValueError):
    """A trace line that is not valid JSON, breaks the schema, or contradicts the lines before it."""

    def __init__(self, *, path: str, line: int, field: str, reason: str) -> None:
        super().__init__(f"{path}:{line}: {field}: {reason}")
        self.path, self.line, self.field, self.reason = path, line, field, reason


def schema() -> dict[str, Any]:
    """The trace JSON Schema (the single copy lives next to this module; docs/trace.schema.json links to it)."""
    return json.loads(resources.files("watchdog.trace").joinpath("trace.schema.json").read_text("utf-8"))


def _definition(definition: str) -> dict[str, Any]:
    return {"$defs": schema()["$defs"], "$ref": f"#/$defs/{definition}"}


@cache
def _validator(definition: str) -> jsonschema.Draft202012Validator:
    # Imported on first use: only reading a trace needs it, and the agent only writes them (2.5 MiB resident).
    import jsonschema

    return jsonschema.Draft202012Validator(_definition(definition))


def _bounded(node: Any) -> Any:
    """A copy of a schema node in which every number is bounded by MAX_INTEGER_DIGITS, so the fast path sends an
    over-long integer to the precise path, whose refusal names it."""
    if isinstance(node, list):
        return [_bounded(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _bounded(value) for key, value in node.items()}
    types = out.get("type")
    if {"number", "integer"} & set(types if isinstance(types, list) else [types]):
        out.setdefault("maximum", 10**MAX_INTEGER_DIGITS)
        out.setdefault("minimum", -(10**MAX_INTEGER_DIGITS))
    return out


@cache
def _compiled(definition: str) -> Callable[[Any], Any]:
    # The schema uses nothing beyond draft 7 ($ref into $defs, if/then, propertyNames), which fastjsonschema
    # compiles; tests/trace/test_trace_parsing.py checks its verdicts against jsonschema's.
    return fastjsonschema.compile(_bounded(_definition(definition)))


def check(instance: Any, definition: str, *, path: str, line: int) -> None:
    """Raise TraceError with jsonschema's best-matching message when ``instance`` breaks ``$defs/definition``."""
    from jsonschema.exceptions import best_match

    error = best_match(_validator(definition).iter_errors(instance))
    if error is not None:
        field = ".".join(str(part) for part in error.absolute_path) or "(line)"
        raise TraceError(path=path, line=line, field=field, reason=error.message)


def load_line(raw: bytes, definition: str, *, path: str, line: int) -> dict[str, Any]:
    """The line's data, valid against ``$defs/definition``; TraceError naming the field otherwise."""
    if FAST:
        try:
            data = msgspec.json.decode(raw)
            _compiled(definition)(data)
            return data
        except (msgspec.DecodeError, RecursionError, fastjsonschema.JsonSchemaException):
            pass  # the precise path says why, with the field
    data = parse(raw, path=path, line=line)
    check(data, definition, path=path, line=line)
    return data


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


def parse(raw: bytes, *, path: str, line: int) -> Any:
    """The precise path: Python's json, refusing what RFC 8259 refuses, with the field of a refused number."""
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
