"""The detection stage: sample + attribution in, findings out. Pure: no I/O, no asyncio (import-linter checks it).

Public API: `Detector(policy, tenant_label=...)`, its `step(sample, attribution, external_signals=...)` and
`set_policy(policy)`, `changes(previous, current)`, and `classify` for Xid events. docs/detection.md explains the
signals, thresholds and the traps each detector is built to avoid.
"""

from watchdog.detection.detector import Change, Detector, changes
from watchdog.detection.domains import Device, Domain, DomainKind, devices_of, domains_of
from watchdog.detection.xid import XidClass, classify

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
