"""The action stage: turn findings into at most a few safe, paced, audited evictions.

decide (decision.py, pure rules) → pace (pacing.py, pure clocked state) → act (evictor.py, the only module that
calls the Eviction API). `ActionStage` (stage.py) is what the service runs each cycle, and what restores the pacing
memory at agent start; `plan()` (planning.py) is the same rules and pacing without any I/O, for replay and scenario
runs; `effective_policy()` is the runtime overlay both apply.
"""

from __future__ import annotations

from watchdog.action.audit import AuditLog, audit_record
from watchdog.action.decision import decide
from watchdog.action.eligibility import protection, refusal
from watchdog.action.evictor import EvictionApi, Evictor, SendGate
from watchdog.action.killswitch import KillSwitch
from watchdog.action.pacing import Pacer, PastAttempt
from watchdog.action.planning import effective_policy, plan, would_be, would_be_for
from watchdog.action.stage import ActionStage

__all__ = [
    "ActionStage",
    "AuditLog",
    "EvictionApi",
    "Evictor",
    "KillSwitch",
    "Pacer",
    "PastAttempt",
    "audit_record",
    "SendGate",
    "decide",
    "effective_policy",
    "plan",
    "protection",
    "refusal",
    "would_be",
    "would_be_for",
]
