"""The policy: what the agent looks for (detection) and how it may act (action). Hot-reloadable, unlike the rest
of the settings; its own module so the pure cores can name it without the loading code."""

from __future__ import annotations

from pydantic import Field

from watchdog.config._base import Section
from watchdog.config.action import ActionPolicy
from watchdog.config.detection import DetectionPolicy


class Policy(Section):
    """What the agent looks for and how it may act; hot-reloadable."""

    detection: DetectionPolicy = Field(default_factory=DetectionPolicy, description="Detection thresholds.")
    action: ActionPolicy = Field(default_factory=ActionPolicy, description="Eviction rules, limits and mode.")
