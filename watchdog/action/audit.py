"""One JSON line per eviction decision or attempt: the record an operator reads after the fact.

Every result the evictor reaches — evicted, dry_run, blocked_pdb, protected, pending … — is written here with the
evidence and the pods it was meant to protect, so "why did (or didn't) it evict X?" is answered by grep, not by
re-running. The sink is a file, a text stream or a `logging.Logger`; writing never raises into the pipeline.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from watchdog.model import ActionOutcome, Decision, Mode

log = logging.getLogger(__name__)


def audit_record(
    *, timestamp: float, node: str | None, mode: Mode, decision: Decision | None = None,
    outcome: ActionOutcome | None = None, controller: str | None = None,
) -> dict[str, Any]:
    """The JSON object of one line; from the outcome when there is one, else from the decision alone.

    ``node`` is the node the action is about (None when an alert named none); ``controller``, the controller
    replica that decided, for the controller's lines only: an agent decides about its own node."""
    request = outcome.request if outcome else (decision.request if decision else None)
    result = outcome.result if outcome else (decision.result if decision else None)
    record: dict[str, Any] = {
        "timestamp": datetime.fromtimestamp(timestamp, tz=timezone.utc).isoformat(timespec="milliseconds"),
        "node": node,
        "mode": mode.value,
        "result": result.value if result else None,
        "reason": request.reason if request else (decision.reason if decision else ""),
        "pod": None,
        "priority": None,
        "finding_kind": None,
        "finding_key": None,
        "evidence": {},
        "protects": [],
        "detail": (outcome.detail if outcome and outcome.detail else (decision.detail if decision else "")),
    }
    if decision is not None:
        record["finding_kind"] = decision.finding_kind.value
        record["finding_key"] = decision.finding_key
        if decision.namespace or decision.pod:
            record["pod"] = {"namespace": decision.namespace, "name": decision.pod}
    if request is not None:
        record["pod"] = {"namespace": request.pod.namespace, "name": request.pod.name, "uid": request.pod.uid}
        record["priority"] = request.priority
        record["finding_kind"] = request.finding_kind.value
        record["finding_key"] = request.finding_key
        record["evidence"] = dict(request.evidence)
        record["protects"] = [
            {"namespace": ref.namespace, "name": ref.name, "priority": priority} for ref, priority in request.protects
        ]
        record["message"] = request.message
    if outcome is not None and outcome.http_status is not None:
        record["http_status"] = outcome.http_status
    if controller is not None:
        record["controller"] = controller
    return record


class AuditLog:
    """Appends audit lines to a path, a stream, or a logger (exactly one of them)."""

    def __init__(
        self,
        *,
        path: str | Path | None = None,
        stream: TextIO | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        if sum(x is not None for x in (path, stream, logger)) != 1:
            raise ValueError("AuditLog needs exactly one of path, stream or logger")
        self._path = Path(path) if path is not None else None
        self._stream = stream
        self._logger = logger
        self._lock = threading.Lock()
        self.failures = 0
        self.lines = 0

    @classmethod
    def from_setting(cls, value: str | None) -> "AuditLog":
        """Settings.audit_log: None → the 'gpu_watchdog.audit' logger, '-' → stdout, anything else → a file."""
        if value is None:
            return cls(logger=logging.getLogger("gpu_watchdog.audit"))
        if value == "-":
            return cls(stream=sys.stdout)
        return cls(path=value)

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, sort_keys=True, default=str)
        try:
            with self._lock:
                if self._path is not None:
                    with self._path.open("a", encoding="utf-8") as handle:
                        handle.write(line + "\n")
                elif self._stream is not None:
                    self._stream.write(line + "\n")
                    self._stream.flush()
                else:
                    assert self._logger is not None
                    self._logger.info(line)
            self.lines += 1
        except OSError as exc:
            # The audit sink must never stop an eviction cycle; the failure is counted and logged instead.
            self.failures += 1
            log.warning("audit line not written: %s", exc)
