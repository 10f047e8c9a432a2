"""The agent's settings (one model per topic) and its policy (detection + action), validated with field paths.

Settings configure the process and are read once at start. The policy (what counts as interference, quotas,
when and whom to evict) can live in its own file, which the service reloads while running: an invalid edit is
refused and the last good policy stays in force.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from pydantic import Field

from watchdog.config._base import Section
from watchdog.config.action import ActionPolicy
from watchdog.config.attribution import AttributionSettings
from watchdog.config.controller import ControllerSettings
from watchdog.config.detection import DetectionPolicy
from watchdog.config.flight_recorder import FlightRecorderSettings
from watchdog.config.kube import KubeSettings
from watchdog.config.loading import ConfigError, MalformedFile, deep_merge, env_overrides, read_yaml, validate
from watchdog.config.mqtt import MqttSettings
from watchdog.config.names import NamespaceName, ObjectNameOrEmpty
from watchdog.config.publishing import PublishingSettings
from watchdog.config.policy import Policy
from watchdog.config.sampling import SamplingSettings
from watchdog.config.prometheus_signals import BorrowedActivitySettings, SignalsSettings
from watchdog.config.whatif import WhatIfSettings
from watchdog.model import Mode

__all__ = [
    "ActionPolicy",
    "AttributionSettings",
    "ConfigError",
    "ControllerSettings",
    "DetectionPolicy",
    "FlightRecorderSettings",
    "KubeSettings",
    "MalformedFile",
    "MqttSettings",
    "Policy",
    "PublishingSettings",
    "SamplingSettings",
    "SignalsSettings",
    "BorrowedActivitySettings",
    "Settings",
    "WhatIfSettings",
    "check_data",
    "check_file",
    "load_policy",
    "load_settings",
    "read_yaml",
]


class Settings(Section):
    """Everything the agent process needs to start."""

    node_name: ObjectNameOrEmpty = Field(
        "", description="This node's name; defaults to $NODE_NAME, then the host name."
    )
    namespace: NamespaceName = Field("gpu-watchdog", description="The agent's own namespace (always protected).")
    sampling: SamplingSettings = Field(default_factory=SamplingSettings, description="NVML sampling.")
    attribution: AttributionSettings = Field(default_factory=AttributionSettings, description="Pod attribution.")
    kube: KubeSettings = Field(default_factory=KubeSettings, description="Kubernetes API access.")
    publishing: PublishingSettings = Field(default_factory=PublishingSettings, description="Metrics endpoint.")
    controller: ControllerSettings = Field(default_factory=ControllerSettings, description="Cluster controller.")
    signals: SignalsSettings = Field(default_factory=SignalsSettings, description="Tenant victim-signal queries.")
    mqtt: MqttSettings = Field(default_factory=MqttSettings, description="MQTT event stream (off by default).")
    flight_recorder: FlightRecorderSettings = Field(
        default_factory=FlightRecorderSettings, description="Rolling trace of the last ticks on disk (off by default)."
    )
    whatif: WhatIfSettings = Field(
        default_factory=WhatIfSettings, description="Fleet what-if API on its own port (off until token_file is set)."
    )
    policy: Policy = Field(default_factory=Policy, description="Inline policy, used when policy_file is unset.")
    policy_file: str | None = Field(None, description="Policy YAML reloaded while running (overrides `policy`).")
    mode_override: Mode | None = Field(
        None, description="Action mode forced over every policy's, reloads included (`--mode`; `record` forces observe)."
    )
    audit_log: str | None = Field(None, description="File receiving one JSON line per eviction decision ('-' = stdout).")
    log_level: str = Field("INFO", description="Python logging level.")


def load_settings(
    path: str | Path | None = None,
    *,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Defaults < YAML file < environment < flags; raises ConfigError naming each invalid field."""
    data: dict[str, Any] = read_yaml(path) if path else {}
    data = deep_merge(data, env_overrides(environ, known=Settings.model_fields))
    data = deep_merge(data, dict(flags or {}))
    return validate(Settings, data, source=str(path or "settings"))


def load_policy(path: str | Path) -> Policy:
    """Read a policy file (top-level `detection:` and `action:`); raises ConfigError naming each invalid field."""
    return validate(Policy, read_yaml(path), source=str(path))


def check_file(path: str | Path) -> tuple[str, list[tuple[str, str]]]:
    """Validate a settings or policy file; returns (what it was taken for, problems)."""
    try:
        data = read_yaml(path)
    except ConfigError as exc:
        return "YAML", exc.problems
    return check_data(data, source=str(path))


def check_data(data: Mapping[str, Any], *, source: str) -> tuple[str, list[tuple[str, str]]]:
    """Validate parsed settings or policy data; returns (what it was taken for, problems)."""
    # Settings have no top-level detection/action: a file naming either is a policy (a stray key is then its error).
    kind, model = ("policy", Policy) if set(data) & {"detection", "action"} else ("settings", Settings)
    try:
        validate(model, data, source=source)
    except ConfigError as exc:
        return kind, exc.problems
    return kind, []
