"""Which evictions count as "the same workload again": a pod's lineage, and how long a lineage waits after each one.

A pod evicted from a ReplicaSet (or a Job) comes back under a new random name, so a memory keyed by namespace/name
forgets it at once: the replacement lands on the same GPU, breaches the same limit and, with only the tenant cooldown
in the way, is evicted every few minutes forever — the eviction loop the descheduler is most often reported for
(kubernetes-sigs/descheduler #424, #994). The pacer therefore also remembers evictions per lineage and doubles the
lineage's cooldown on each repeat.

PodInfo knows the controller's kind but not its name or uid, so the lineage is approximated from the pod name: the
ReplicaSet controller and the Job controller name pods `<owner name>-<5 random characters>` (apiserver's
names.SimpleNameGenerator: utilrand.String(5) over "bcdfghjklmnpqrstvwxz2456789"), and that suffix is stripped. A
StatefulSet's replacement keeps the pod's name, and a pod without a controller has no replacement: both are their own
lineage. PURE: no I/O, no asyncio.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# k8s.io/apimachinery/pkg/util/rand: the alphabet generateName suffixes are drawn from (no vowels, no 0/1/3).
_GENERATED_SUFFIX = re.compile(r"^(?P<base>.+)-[bcdfghjklmnpqrstvwxz2456789]{5}$")
# Controllers whose pods are named generateName-style after the owner, so a replacement differs in the suffix only.
GENERATED_NAME_OWNERS = frozenset({"ReplicaSet", "Job"})


def lineage_key(*, namespace: str, name: str, owner_kind: str | None) -> str:
    """The key evictions of "the same workload" share: `ns/ReplicaSet/<rs name>`, or `ns//<pod name>` when the pod's
    name is its own (no controller, a StatefulSet, a name that does not look generated)."""
    if owner_kind in GENERATED_NAME_OWNERS:
        match = _GENERATED_SUFFIX.match(name)
        if match:
            return f"{namespace}/{owner_kind}/{match.group('base')}"
    return f"{namespace}//{name}"


@dataclass(frozen=True, slots=True)
class Lineage:
    """What is remembered of one lineage: how many evictions in a row, and until when the next one waits."""

    repeats: int  # 0 after the first eviction, 1 after the second within the window, …
    until: float  # no eviction of this lineage before this time
    forget_at: float  # after this, the next eviction counts as a first one again

    def describe(self, now: float) -> str:
        times = "once" if self.repeats == 0 else f"{self.repeats + 1} times in a row"
        return f"evicted {times}; its replacement waits {self.until - now:.0f}s more"


def next_lineage(
    previous: Lineage | None, *, now: float, base_seconds: float, max_seconds: float, window_seconds: float
) -> Lineage:
    """The lineage after one more eviction at `now`: a repeat (the previous record is still remembered) doubles the
    cooldown, up to `max_seconds`; the record is kept `window_seconds` past the cooldown's end."""
    repeats = previous.repeats + 1 if previous is not None and now < previous.forget_at else 0
    cooldown = min(base_seconds * 2 ** min(repeats, 32), max(max_seconds, base_seconds))
    until = now + cooldown
    if previous is not None:
        until = max(until, previous.until)  # an out-of-order (restored) record never shortens a wait
    return Lineage(repeats=repeats, until=until, forget_at=until + window_seconds)
