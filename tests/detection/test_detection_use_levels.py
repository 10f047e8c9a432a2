"""Victims' levels and pairs keep nothing twice that is equal by construction (detection/levels.py).

That sharing must not change a single bit of what the antagonist search reads. These tests hold it to a plain
implementation that keeps every victim's levels and every pair's six moments apart (the one it replaced), over
random sequences of ticks with the irregular parts real domains have: members that come late, go missing, read
NaN or are forgotten; victims that learn on some ticks and not others, or without their own use; a victim that
learned alone before it joined a PCIe link's shared levels.
"""

from __future__ import annotations

import math

from hypothesis import example, given, settings
from hypothesis import strategies as st

from watchdog.detection.levels import LevelSet, UseLevels, learn_domain, learn_link
from watchdog.detection.rings import UNATTRIBUTED, Baseline

ALPHA = 0.05
MEMBERS = ("ns/a", "ns/b", "ns/c", "ns/d")


class PlainLevels:
    """Every level and every pair's six moments kept apart, updated one by one."""

    def __init__(self) -> None:
        self.levels: dict[str, dict[str, Baseline]] = {"use": {}, "load": {}}
        self.joint: dict[str, list[float]] = {}

    def learn(self, use, share, unattributed, *, levels=True, own=None, skip=None) -> None:
        if levels:
            for member, value in use.items():
                if value is not None and math.isfinite(value):
                    self.levels["use"].setdefault(member, Baseline()).update(value, alpha=ALPHA)
                    load = value * share.get(member, 1.0)
                    if math.isfinite(load):
                        self.levels["load"].setdefault(member, Baseline()).update(load, alpha=ALPHA)
            if unattributed is not None and math.isfinite(unattributed):
                self.levels["load"].setdefault(UNATTRIBUTED, Baseline()).update(unattributed, alpha=ALPHA)
        if own is None:
            return
        keep = 1.0 - ALPHA
        for member, value in use.items():
            if value is None or member == skip or not math.isfinite(value):
                continue
            joint = self.joint.get(member)
            if joint is None:
                self.joint[member] = [1.0, own, value, 0.0, 0.0, 0.0]
                continue
            count, mean_own, mean_its, var_own, var_its, cov = joint
            dx, dy = own - mean_own, value - mean_its
            joint[:] = (count + 1, mean_own + ALPHA * dx, mean_its + ALPHA * dy, keep * (var_own + ALPHA * dx * dx),
                        keep * (var_its + ALPHA * dy * dy), keep * (cov + ALPHA * dx * dy))

    def share_levels(self, other: PlainLevels) -> None:
        self.levels = other.levels

    def known(self, what: str, *, min_count: int) -> dict[str, float]:
        return {m: b.mean for m, b in self.levels[what].items() if b.count >= min_count}

    def comovement(self, *, min_count: int) -> dict[str, float]:
        result = {}
        for member, (count, _, _, var_own, var_its, cov) in self.joint.items():
            if count >= min_count:
                denom = math.sqrt(var_own * var_its)
                result[member] = cov / denom if denom > 1e-12 else 0.0
        return result

    def forget(self, member: str) -> None:
        for series in self.levels.values():
            series.pop(member, None)
        self.joint.pop(member, None)


value = st.one_of(st.none(), st.just(math.nan), st.floats(0.0, 1.0, allow_nan=False))
use_of_tick = st.dictionaries(st.sampled_from(MEMBERS), value, max_size=len(MEMBERS))
tick = st.tuples(
    use_of_tick,
    st.one_of(st.none(), st.floats(0.0, 1.0)),  # unattributed
    st.sets(st.sampled_from(MEMBERS)),  # the victims that learn on this tick
    st.one_of(st.none(), st.sampled_from(MEMBERS)),  # a member forgotten after the tick
)
SHARE = {"ns/a": 0.5, "ns/b": 1.0, "ns/c": 0.25, "ns/d": 1 / 7}


def same(fast: UseLevels, plain: PlainLevels) -> None:
    for count in (0, 1, 3, 8):
        assert fast.known("use", min_count=count) == plain.known("use", min_count=count)
        assert fast.known("load", min_count=count) == plain.known("load", min_count=count)
        assert fast.comovement(min_count=count) == plain.comovement(min_count=count)  # bit for bit, in order


def forget(member, fast, plain) -> None:
    for victim in MEMBERS:
        fast[victim].forget(member)
        plain[victim].forget(member)


@settings(max_examples=300, deadline=None)
@given(st.lists(tick, min_size=1, max_size=60))
def test_victims_that_learn_apart_see_what_each_would_see_alone(ticks):
    """learn_domain: victims learning on the same ticks share levels, split when they do not, and new victims
    learning together start one set; each reads exactly its own history."""
    fast = {m: UseLevels() for m in MEMBERS}
    plain = {m: PlainLevels() for m in MEMBERS}
    for use, unattributed, learners, gone in ticks:
        if learners:
            learn_domain([(m, fast[m], m in learners) for m in MEMBERS], use, SHARE, unattributed, alpha=ALPHA,
                         load=True)
        for m in MEMBERS:
            if m in learners:
                plain[m].learn(use, SHARE, unattributed, own=use.get(m), skip=m)
        for m in MEMBERS:
            same(fast[m], plain[m])
        if gone is not None:
            forget(gone, fast, plain)
            for m in MEMBERS:
                same(fast[m], plain[m])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(use_of_tick, st.one_of(st.none(), st.floats(0.0, 1.0))), max_size=20),
       st.lists(tick, min_size=1, max_size=50))
@example(alone=[], ticks=[  # ns/a sits out the second tick while the link's levels move on
    ({"ns/a": 0.5, "ns/b": 0.2}, None, {"ns/a", "ns/b"}, None),
    ({"ns/a": 0.6, "ns/b": 0.9}, None, {"ns/b"}, None),
    ({"ns/a": 0.1, "ns/b": 0.3}, None, {"ns/a", "ns/b"}, None),
])
def test_the_victims_of_a_link_share_its_levels_and_keep_their_own_pairs(alone, ticks):
    """learn_link: a victim joins the link's levels when it first learns (one had learned alone before), every
    victim reads them from then on whether it learns or not, and its pairs stay its own."""
    fast = {m: UseLevels() for m in MEMBERS}
    plain = {m: PlainLevels() for m in MEMBERS}
    for use, unattributed in alone:
        learn_domain([("ns/a", fast["ns/a"], True)], use, SHARE, unattributed, alpha=ALPHA, load=True)
        plain["ns/a"].learn(use, SHARE, unattributed, own=use.get("ns/a"), skip="ns/a")
    link, plain_link = LevelSet(), PlainLevels()
    joined: set[str] = set()
    for use, unattributed, learners, gone in ticks:
        if not learners:
            continue  # the detector feeds a link only on a tick somebody learns
        learn_link(link, [(m, fast[m], m in learners) for m in MEMBERS], use, alpha=ALPHA)
        for m in MEMBERS:
            if m in learners:
                if m not in joined:
                    plain[m].share_levels(plain_link)
                    joined.add(m)
                if use.get(m) is not None:
                    plain[m].learn(use, SHARE, unattributed, levels=False, own=use[m], skip=m)
        plain_link.learn(use, SHARE, None)
        for m in joined:
            assert fast[m].known("use", min_count=0) == plain[m].known("use", min_count=0)
            assert fast[m].comovement(min_count=0) == plain[m].comovement(min_count=0)
        if gone is not None:
            forget(gone, fast, plain)


def test_steady_victims_share_one_set_of_levels_and_pairs_keep_a_covariance_only():
    """What the sharing is for: on a node where nothing changes, a domain's levels are fed once a tick, not once
    per victim, and a pair keeps one number, not copies of two levels."""
    victims = {m: UseLevels() for m in MEMBERS}
    for step in range(20):
        use = {m: 0.3 + i / 10 + step / 100 for i, m in enumerate(MEMBERS)}
        learn_domain([(m, lv, True) for m, lv in victims.items()], use, SHARE, None, alpha=ALPHA, load=True)
    assert len({id(lv.levels) for lv in victims.values()}) == 1
    joint = victims["ns/a"]._joint["ns/b"]
    assert joint.own is None and joint.its is None and joint.count == 20
    use = {m: 0.5 for m in MEMBERS if m != "ns/b"}
    learn_domain([(m, lv, m != "ns/c") for m, lv in victims.items()], use, SHARE, None, alpha=ALPHA, load=True)
    assert victims["ns/c"].levels is not victims["ns/a"].levels  # it did not learn: its levels split off
    assert victims["ns/a"]._joint["ns/b"].own is not None  # ns/b missing: the pair keeps its own "own" from here
