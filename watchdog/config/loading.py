"""Reading settings and policies from YAML, environment and flags, with errors that name the field.

Precedence, lowest first: model defaults, the YAML file, environment variables ``GPU_WATCHDOG_<TOPIC>__<FIELD>``,
then command-line flags. A file that does not validate is refused with every invalid field's dotted path and
reason; it is never half-applied.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Mapping, TypeVar

from pydantic import BaseModel, ValidationError

from watchdog.config.yaml_reader import MalformedYaml, parse_yaml

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


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Parse a YAML mapping; anything but a mapping, as YAML text, is a MalformedFile naming the file and line."""
    raw = Path(path).read_bytes()
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
        problems = [(".".join(str(p) for p in err["loc"]) or "(document)", err["msg"]) for err in exc.errors()]
        raise ConfigError(source, problems) from None
