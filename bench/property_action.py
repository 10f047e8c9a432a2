"""The action stage's property check with many more random worlds than the suite runs (tests/action/
test_action_property.py runs a fixed 10 000).

Every world (a policy, pods and cycles of findings) goes through the real `effective_policy` + `plan`, and every
request let through is checked by the oracle in tests/action/action_property.py: the floor, the policy's own
protections, `protects`, the token bucket, pod/tenant/workload cooldowns within and across cycles, hysteresis.
Fresh random worlds each run unless --seed is given; a violation is shrunk by Hypothesis, printed, and exits 1.

Run: .venv/bin/python bench/property_action.py --examples 200000 [--seed 7]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, given, note, seed, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "action"))

from action_property import run_world, worlds  # noqa: E402  (the oracle lives with the tests it serves)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200_000, help="random worlds to check")
    parser.add_argument("--seed", type=int, default=None, help="repeat a run (default: fresh randomness)")
    args = parser.parse_args(argv)
    totals = {"worlds": 0, "cycles": 0, "sends": 0}

    @settings(max_examples=args.examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(worlds())
    def check(world):
        try:
            oracle = run_world(world)
        except AssertionError:
            note(repr(world))
            raise
        totals["worlds"] += 1
        totals["cycles"] += len(world.cycles)
        totals["sends"] += oracle.sends

    if args.seed is not None:
        check = seed(args.seed)(check)
    started = time.perf_counter()
    try:
        check()
    except AssertionError as exc:
        print(f"VIOLATION after {totals['worlds']} worlds: {exc}")
        return 1
    elapsed = time.perf_counter() - started
    print(f"{totals['worlds']} worlds, {totals['cycles']} cycles, {totals['sends']} requests let through and "
          f"checked: 0 violations ({elapsed:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
