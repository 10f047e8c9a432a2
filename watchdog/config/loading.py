"""Reading settings and policies from YAML, environment and flags, with errors that name the field.

Precedence, lowest first: model defaults, the YAML file, environment variables ``GPU_WATCHDOG_<TOPIC>__<FIELD>``,
then command-line flags. A file that does not validate is refused with every invalid field's dotted path and
reason; it is never half-applied. A file larger than ``limits.MAX_FILE_BYTES`` is refused before it is parsed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Mapping, TypeVar

from pydantic import BaseModel, ValidationError

from watchdog.config.limits import MAX_FILE_BYTES, MIB
from watchdog.config.yaml_reader import MalformedYaml, parse_yaml
from watchdog.model.text import bounded

ENV_PREFIX = "GPU_WATCHDOG_"

M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A configuration or policy that does not validate; ``problems`` lists (field path, reason)."""

    def __init__(self, source: str, problems: list[tuple[str, str]]):
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  {path}: {reason}" for path, reason in problems)
        super().__init__(f"{source}: {len(problems)} invalid field(s)\n{lines}")


class MalformedFile(ConfigError):
    """A file that is not readable YAML at all: not UTF-8, a syntax error, a duplicate key, nesting too deep, an
    integer too large. ``str()`` is "FILE:LINE: reason" (LINE 1-based; absent when the parser gave none)."""

    def __init__(self, source: str, reason: str, line: int | None) -> None:
        self.line, self.reason = line, reason
        super().__init__(source, [(f"line {line}" if line is not None else "(document)", reason)])
        self.args = (f"{source}:{line}: {reason}" if line is not None else f"{source}: {reason}",)


class OversizedFile(MalformedFile):
    """A file larger than ``limit`` bytes, refused before any of it is parsed."""

    def __init__(self, source: str, *, size: int | None, limit: int) -> None:
        self.size, self.limit = size, limit
        measured = f"{size} bytes, over" if size is not None else "over"
        super().__init__(source, f"{measured} the limit of {limit} bytes ({limit / MIB:g} MiB) for a settings or "
                                 "policy file", None)


def _read_capped(path: str | Path, limit: int) -> bytes:
    """The file's bytes, reading at most ``limit`` + 1 of them: a larger file is an OversizedFile (its size as stat
    gives it; a pipe or a /proc file, whose size stat does not know, is only said to exceed the limit)."""
    with open(path, "rb") as stream:
        raw = stream.read(limit + 1)
        if len(raw) > limit:
            size = os.fstat(stream.fileno()).st_size
            raise OversizedFile(str(path), size=size if size > limit else None, limit=limit)
    return raw


MAX_PATH_PART = 64  # how much of one part of a field path (a map key the file chose) an error repeats


def _field_path(loc: tuple[int | str, ...]) -> str:
    """pydantic's location as a dotted path; a map key the file chose is cut, an empty one shown as ""."""
    return ".".join(bounded(str(part), MAX_PATH_PART) if part != "" else '""' for part in loc) or "(document)"


def read_yaml(path: str | Path, *, max_bytes: int = MAX_FILE_BYTES) -> dict[str, Any]:
    """Parse a YAML mapping; anything but a mapping, as YAML text, is a MalformedFile naming the file and line, and
    a file over ``max_bytes`` an OversizedFile, refused unparsed."""
    raw = _read_capped(path, max_bytes)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise MalformedFile(str(path), f"not UTF-8 text: {exc.reason} at byte {exc.start}", line) from None
    try:
        data = parse_yaml(text)
    except MalformedYaml as exc:
        raise MalformedFile(str(path), f"YAML: {exc.reason}", exc.line) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise MalformedFile(str(path), "the top level must be a mapping of sections", 1)
    return data


def env_overrides(environ: Mapping[str, str] | None = None, *, known: Iterable[str] = ()) -> dict[str, Any]:
    """``GPU_WATCHDOG_PUBLISHING__PORT=9000`` → {"publishing": {"port": "9000"}} (pydantic coerces the text).

    Only variables whose first part names a top-level setting in ``known`` are taken. Kubernetes injects
    service-link variables into every pod (a Service "gpu-watchdog-metrics" gives GPU_WATCHDOG_METRICS_PORT=tcp://…);
    taken as settings, they would make the agent refuse to start.
    """
    environ = os.environ if environ is None else environ
    known = set(known)
    out: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        parts = [p.lower() for p in name[len(ENV_PREFIX):].split("__") if p]
        if not parts or parts[0] not in known:
            continue
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                break
        else:
            node[parts[-1]] = value
    return out


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def validate(model: type[M], data: Mapping[str, Any], *, source: str) -> M:
    """Build ``model`` from ``data`` or raise ConfigError listing every invalid field as a dotted path."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = [(_field_path(err["loc"]), bounded(err["msg"])) for err in exc.errors()]
        raise ConfigError(source, problems) from None
