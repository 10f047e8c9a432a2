"""The detection stage: sample + attribution in, findings out. Pure: no I/O, no asyncio (import-linter checks it).

Public API: `Detector(policy)`, its `step(sample, attribution, external_signals=...)` and `set_policy(policy)`,
`changes(previous, current)` (the model's one rule for what changed), and `classify` for Xid events.
docs/detection.md explains the signals, thresholds and the traps each detector is built to avoid.
"""

from watchdog.detection.detector import Detector
from watchdog.detection.domains import Device, Domain, DomainKind, devices_of, domains_of
from watchdog.detection.xid import XidClass, classify
from watchdog.model import Change
from watchdog.model import finding_changes as changes

__all__ = [
    "Change",
    "Detector",
    "Device",
    "Domain",
    "DomainKind",
    "XidClass",
    "changes",
    "classify",
    "devices_of",
    "domains_of",
]
