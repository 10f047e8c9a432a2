"""Every decision ends with exactly one result, counted once per change and written as one audit line: the
evictor's books, apart from its sending.

A standing finding is decided again every cycle; a refusal that merely repeats (pending, cooldown, …) is counted
and audited once per change, so `gpu_watchdog_evictions_total` and the audit log track decisions, not ticks. Keyed
by (finding, pod): one Xid drain decides about several pods of the same finding. Every request actually sent is
counted each time. The evictor settles a cycle's decisions at once and sends beside the tick, so what the books
counted is handed out in batches (`drain`): the cycle's own results, and the sends finished since the last batch.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import replace
from typing import Mapping

from watchdog.action.audit import AuditLog, audit_record
from watchdog.model import ActionOutcome, ActionRecord, ActionReport, Decision, EvictionResult, Mode

log = logging.getLogger(__name__)

_LOGGED = (EvictionResult.EVICTED, EvictionResult.DRY_RUN, EvictionResult.MIGRATING, EvictionResult.BLOCKED_PDB,
           EvictionResult.BLOCKED, EvictionResult.ERROR)


class Ledger:
    """The counts, the standing result of each (finding, pod), and the records not yet handed out."""

    def __init__(self, *, audit: AuditLog, node: str, controller: str | None = None) -> None:
        """`node`: the agent's own node, which every line names. `controller`: the controller replica's identity
        instead; each line then names the node of the decision's alert, and the replica under its own key."""
        self._audit = audit
        self._node = node
        self._controller = controller
        self.counts: Counter[tuple[str, str, str]] = Counter()  # (result, reason, namespace) → n
        self._standing: dict[tuple[str, str], EvictionResult] = {}
        self.last_attempt: dict[tuple[str, str], EvictionResult] = {}  # the last result actually sent for
        self._seen: set[tuple[str, str]] = set()
        self._counted: list[ActionRecord] = []  # counted since the last drain
        self._outcomes: list[ActionOutcome] = []  # of sends finished since the last drain

    def begin_cycle(self) -> None:
        """A new cycle's decisions follow: what none of them names again stops standing at its end."""
        self._seen = set()

    def see(self, decision: Decision) -> None:
        """The decision's (finding, pod) is still decided about this cycle (its send is queued or under way)."""
        self._seen.add((decision.finding_key, decision.pod))

    def end_cycle(self) -> None:
        self._standing = {key: value for key, value in self._standing.items() if key in self._seen}
        self.last_attempt = {key: value for key, value in self.last_attempt.items() if key in self._seen}

    def sent(self, outcome: ActionOutcome | None) -> None:
        """A send finished: its outcome goes out with the next batch."""
        if outcome is not None:
            self._outcomes.append(outcome)

    def drain(self) -> ActionReport:
        """What was counted (and sent) since the last drain."""
        outcomes, self._outcomes = tuple(self._outcomes), []
        counted, self._counted = tuple(self._counted), []
        return ActionReport(outcomes=outcomes, counted=counted)

    def account(
        self,
        decision: Decision,
        result: EvictionResult,
        *,
        detail: str,
        now: float,
        mode: Mode,
        http_status: int | None = None,
        sent: bool = False,
    ) -> ActionOutcome | None:
        """Give `decision` its result: counted and audited unless it only repeats its standing refusal; the
        outcome when the decision names a pod."""
        request = decision.request
        namespace = decision.namespace or (request.pod.namespace if request else "")
        reason = request.reason if request else decision.reason
        outcome = None
        if request is not None:
            outcome = ActionOutcome(request, result, mode, now, detail=detail, http_status=http_status)
        key = (decision.finding_key, decision.pod)
        self._seen.add(key)
        if not sent and self._standing.get(key) is result:
            return outcome  # the same refusal as last cycle: already counted and audited
        self._standing[key] = result
        self.counts[(result.value, reason, namespace)] += 1
        pod = decision.pod or (request.pod.name if request else "")
        self._counted.append(ActionRecord(
            result=result, reason=reason, namespace=namespace, pod=pod,
            finding_key=decision.finding_key, finding_kind=decision.finding_kind, mode=mode, timestamp=now,
            detail=detail, uid=request.pod.uid if request else "", http_status=http_status,
        ))
        final = decision if decision.result is result else replace(decision, result=result, detail=detail)
        if self._controller is None:
            record = audit_record(timestamp=now, node=self._node, mode=mode, decision=final, outcome=outcome)
        else:
            record = audit_record(timestamp=now, node=final.node or None, mode=mode, decision=final, outcome=outcome,
                                  controller=self._controller)
        self._audit.write(record)
        if result in _LOGGED:
            log.info("eviction %s %s/%s: %s", result.value, namespace, decision.pod, detail)
        return outcome

    def snapshot_counts(self) -> Mapping[tuple[str, str, str], int]:
        return dict(self.counts)
