"""How long a VM waits after a live migration before it may be asked to move again, growing with each repeat.

A migration is costly (memory copied across the network, a pause at the switch-over) and a VM that moves to a node
where it meets the same contention would be moved back and forth: the VM form of the descheduler's eviction loop.
The descheduler's KubevirtMigrationAware evictor plugin (openshift/descheduler PR #591) answers with an adaptive
cooldown after each migration; so does this module, with the workload rule of lineage.py: the first migration of a
VMI starts `migration_cooldown_seconds`, each further one within `migration_repeat_window_seconds` of the previous
cooldown's end doubles it, up to `migration_cooldown_max_seconds`.

Migrations count whoever caused them: the ones this agent asked for (the evictor's `migrating`, dry-run and
observe included, as every other cooldown) and the ones it only sees end in a VMI's status.migrationState (a drain,
an operator, the descheduler). A migration seen ending is timed from when it was first seen ended, on the pacing
clock: the VMI's endTimestamp is wall time, which no guarantee here runs on, and the VMI list is at most a refresh
period old, so the wait errs long. The first list after a restart shows every VMI's last migration as new; each
then waits one base cooldown, the cautious reading of a past the agent cannot time. A migration the agent asked
for and then sees end is one migration, not two: its cooldown restarts from the end, its count does not grow. A
VMI that leaves this node's list has moved: the end of the migration asked for here is the target node's to see,
so the next end seen here (the VM brought back) is another migration and counts.
PURE: no I/O, no asyncio; the clock is an argument.
"""

from __future__ import annotations

from typing import Iterable

from watchdog.action.lineage import Lineage, next_lineage
from watchdog.action.vm_rules import is_launcher
from watchdog.config.action import VmPolicy
from watchdog.model import PodInfo, VmiInfo
from watchdog.model.vms import CREATED_BY_LABEL

_MAX_REMEMBERED = 10_000  # VMIs whose last migration end is remembered; past it the memory starts over


class MigrationMemory:
    """Per VMI uid: how many migrations in a row, and until when the next request for it waits; and which VMI each
    launcher pod the pacer has seen runs (its kubevirt.io/created-by label), so requests are judged by their VM."""

    def __init__(self) -> None:
        self._vmi_of: dict[str, str] = {}  # launcher pod key → its VMI's uid
        self._records: dict[str, Lineage] = {}
        self._names: dict[str, str] = {}  # uid → namespace/name of every VMI seen, for the detail
        self._seen_end: dict[str, str] = {}  # uid → the migrationState.endTimestamp already counted
        self._awaiting_end: set[str] = set()  # migrations requested here whose end is still to be seen

    def observe(self, vmis: Iterable[VmiInfo], *, now: float, policy: VmPolicy) -> None:
        """Count the migrations the VMIs' statuses show ended since the last look; `vmis`: all of this node's (none
        when unknown, which errs long: an awaited end then counts as a further migration)."""
        if len(self._seen_end) > _MAX_REMEMBERED or len(self._names) > _MAX_REMEMBERED:
            self._seen_end.clear()
            self._names.clear()
        vmis = list(vmis)
        self._awaiting_end &= {vmi.uid for vmi in vmis}
        for vmi in vmis:
            if vmi.uid:
                self._names[vmi.uid] = vmi.key
            if not vmi.uid or not vmi.migration_end or self._seen_end.get(vmi.uid) == vmi.migration_end:
                continue
            self._seen_end[vmi.uid] = vmi.migration_end
            previous = self._records.get(vmi.uid)
            if vmi.uid in self._awaiting_end and previous is not None:
                self._awaiting_end.discard(vmi.uid)
                self._records[vmi.uid] = _restarted(previous, now=now, policy=policy)
            else:
                self._records[vmi.uid] = _next(previous, now=now, policy=policy)

    def learn(self, pod: PodInfo) -> None:
        """Note the VMI a launcher pod runs (nothing for a pod that runs no VM)."""
        if len(self._vmi_of) > _MAX_REMEMBERED:
            self._vmi_of.clear()
        if is_launcher(pod) and pod.labels.get(CREATED_BY_LABEL):
            self._vmi_of[pod.ref.key] = pod.labels[CREATED_BY_LABEL]

    def requested(self, pod_key: str, *, now: float, policy: VmPolicy) -> None:
        """An attempt on the pod went through (or, by mode, stood for one): for a launcher pod, its VM migrates."""
        uid = self._vmi_of.get(pod_key)
        if uid is None:
            return
        self._records[uid] = _next(self._records.get(uid), now=now, policy=policy)
        self._awaiting_end.add(uid)

    def wait(self, pod_key: str, *, now: float) -> str | None:
        """Why a request for the pod's VM must wait now, or None (also for a pod that runs no VM)."""
        uid = self._vmi_of.get(pod_key)
        record = self._records.get(uid) if uid is not None else None
        if record is None or record.until <= now:
            return None
        times = "once" if record.repeats == 0 else f"{record.repeats + 1} times in a row"
        name = self._names.get(uid, uid)
        return f"VMI {name} migrated {times}; migration cooldown {record.until - now:.0f}s left"

    def forget_expired(self, now: float) -> None:
        for uid in [uid for uid, record in self._records.items() if record.forget_at <= now]:
            del self._records[uid]
            self._awaiting_end.discard(uid)


def _next(previous: Lineage | None, *, now: float, policy: VmPolicy) -> Lineage:
    return next_lineage(previous, now=now, base_seconds=policy.migration_cooldown_seconds,
                        max_seconds=policy.migration_cooldown_max_seconds,
                        window_seconds=policy.migration_repeat_window_seconds)


def _restarted(record: Lineage, *, now: float, policy: VmPolicy) -> Lineage:
    """The same migration's cooldown, timed again from its end (never shortened)."""
    cooldown = min(policy.migration_cooldown_seconds * 2 ** min(record.repeats, 32),
                   max(policy.migration_cooldown_max_seconds, policy.migration_cooldown_seconds))
    until = max(record.until, now + cooldown)
    return Lineage(repeats=record.repeats, until=until, forget_at=until + policy.migration_repeat_window_seconds)
