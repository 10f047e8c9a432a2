"""No random policy, pod set or sequence of cycles makes `plan` break a guarantee.

10 000 random worlds (each a policy, up to seven pods and up to five cycles of findings) run through the real
decide + pace (`watchdog.action.plan`) and are checked by an independent oracle (action_property.py): the floor, the
policy's own protections, `protects`, the token bucket, pod/tenant/workload cooldowns within and across cycles,
hysteresis, one eviction per pod and per finding per cycle. Derandomized and database-free, so every run checks the
same worlds; `bench/property_action.py --examples N` checks N fresh ones.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, note, settings

from action_property import run_world, worlds

EXAMPLES = 10_000


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(worlds())
def test_no_world_breaks_a_guarantee(world):
    try:
        run_world(world)
    except AssertionError:
        note(repr(world))  # the decoded world, readable, for the failing example only
        raise
