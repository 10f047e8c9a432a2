"""The detection stage: sample + attribution in, findings out. Pure: no I/O, no asyncio (import-linter checks it).

Public API: `Detector(policy)`, its `step(sample, attribution, external_signals=...)`, `set_policy(policy)` and
`last_failures` (the finding sources that lost their findings of the last tick); `SOURCES`, the registry of finding
sources, and the `FindingSource` protocol over one `TickView` a tick; `changes(previous, current)` (the model's one
rule for what changed), and `classify` for Xid events.
docs/detection.md explains the signals, thresholds and the traps each detector is built to avoid.
"""

from watchdog.detection.detector import SOURCES, Detector
from watchdog.detection.domain_types import Device, Domain, DomainKind
from watchdog.detection.domains import devices_of, domains_of
from watchdog.detection.view import FindingSource, TickView, ViewUnavailable
from watchdog.detection.xid import XidClass, classify
from watchdog.model import Change
from watchdog.model import finding_changes as changes

__all__ = [
    "SOURCES",
    "Change",
    "Detector",
    "Device",
    "Domain",
    "DomainKind",
    "FindingSource",
    "TickView",
    "ViewUnavailable",
    "XidClass",
    "changes",
    "classify",
    "devices_of",
    "domains_of",
]
