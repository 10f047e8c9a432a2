"""Which policy a replay applies, and the words that say so: the trace's own, a file's, or the defaults.

A replay is only worth reading when the reader knows what it applied. A trace records the policy in force when it
began (docs/trace-format.md, header ``policy``), so by default a replay applies that one; ``--policy`` may name a
policy file, or a scenario file, whose ``policy:`` section is what the demo and the evaluation apply to it. A trace
written before traces carried a policy replays under the defaults, and says so. Every choice is named by a
``policy_source`` string in the report (docs/report-format.md): ``trace``, ``defaults``, ``file:<path>`` or
``scenario:<path>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from watchdog.config import ConfigError, Policy, read_yaml
from watchdog.config.loading import validate
from watchdog.trace import Trace

FROM_TRACE = "trace"
DEFAULTS = "defaults"
_SCENARIO_KEYS = frozenset({"gpus", "pods"})
_POLICY_KEYS = frozenset({"detection", "action"})


def is_scenario(data: Mapping[str, Any]) -> bool:
    """A scenario file (docs/scenario-format.md) rather than a policy file: it names GPUs or pods, and no top-level
    policy section."""
    return bool(_SCENARIO_KEYS & set(data)) and not _POLICY_KEYS & set(data)


def _validated(data: Any, *, source: str, prefix: str) -> Policy:
    """``data`` validated exactly as a policy file; a ConfigError's fields are prefixed with where ``data`` lies."""
    if not isinstance(data, Mapping):
        raise ConfigError(source, [(prefix.rstrip(".") or "(document)", "a policy must be a mapping of sections")])
    try:
        return validate(Policy, data, source=source)
    except ConfigError as exc:
        raise ConfigError(source, [(prefix + field, reason) for field, reason in exc.problems]) from None


def load_policy_file(path: str | Path) -> tuple[Policy, str]:
    """The policy a ``--policy``/``--compare`` file names, with its ``policy_source``. A scenario file gives its
    ``policy:`` section (none: the defaults, as the evaluation applies them); ConfigError names a bad field by its
    path in the file (``policy.action.mode`` in a scenario)."""
    data = read_yaml(path)
    if is_scenario(data):
        section = data.get("policy")
        return _validated({} if section is None else section, source=str(path), prefix="policy."), f"scenario:{path}"
    return _validated(data, source=str(path), prefix=""), f"file:{path}"


def policy_mapping(data: Any, *, source: str) -> tuple[Policy, Mapping[str, Any]]:
    """What a policy file's parsed ``data`` holds as a policy — itself, or a scenario's ``policy:`` section — validated
    as ``load_policy_file`` validates it, with the mapping as written (`whatif` posts it to the agents)."""
    if isinstance(data, Mapping) and is_scenario(data):
        section = data.get("policy") or {}
        return _validated(section, source=source, prefix="policy."), section
    return _validated(data, source=source, prefix=""), data


def recorded_policy(trace: Trace) -> Policy | None:
    """The policy the trace's header records, validated as a policy file (ConfigError names the field, under
    ``policy.``); None for a trace that records none."""
    if trace.header.policy is None:
        return None
    return _validated(trace.header.policy, source=f"{trace.path}:1: header", prefix="policy.")


def label(source: str) -> str:
    """A ``policy_source`` in words, as the text report and ``--compare`` name policy A and B."""
    kind, _, path = source.partition(":")
    if kind == "file":
        return path
    if kind == "scenario":
        return f"the policy: section of {path}"
    if source == FROM_TRACE:
        return "the policy recorded in the trace"
    if source == DEFAULTS:
        return "the default policy"
    return source


def stderr_line(report: Mapping[str, Any]) -> str:
    """The one line `gpu-watchdog replay` writes to stderr per trace: which policy its report applied."""
    source = report.get("policy_source", "")
    line = f"{report['trace']['path']}: replayed under {label(source)}"
    if source == DEFAULTS:
        line += " (the trace records none: it predates recorded policies; pass --policy to choose one)"
    changes = report.get("policy_changes") or ()
    if changes:
        line += ", then " + ", then ".join(f"from tick {change['tick']} the policy recorded in {change['path']}"
                                          for change in changes)
    return line
