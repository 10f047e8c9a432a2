"""Fixtures of the detection tests: a fresh detector per test, and the pods of the usual scenarios."""

from __future__ import annotations

import pytest
from detection_builders import pod

from watchdog.config.detection import DetectionPolicy
from watchdog.detection import Detector


@pytest.fixture
def detector() -> Detector:
    return Detector(DetectionPolicy())


@pytest.fixture
def victim_pod():
    return pod("team-a", "infer", priority=1000)


@pytest.fixture
def antagonist_pod():
    return pod("team-b", "train", priority=0)


@pytest.fixture
def bystander_pod():
    return pod("team-c", "notebook", priority=0)
