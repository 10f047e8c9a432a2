"""What a victim's neighbours used on the victim's own baseline ticks, and how they moved with the victim.

Pure (no I/O). The antagonist search compares a neighbour's use while the victim degrades with its use while the
victim was unhindered. Inside the correlation window alone that comparison fails twice: a culprit that ramps up
slowly has no "before" left in the window once the victim has degraded for a while, and a culprit that pauses a few
ticks (a checkpoint) leaves too few steady ticks to re-judge it. So each victim keeps levels (EWMA means) fed only
on the ticks that feed its own signal baseline: what the neighbours used while the victim was *known* to be fine,
however long ago that was. Two levels per member: its "use" and, in the power domain, its "load" (use × its share).

The same ticks give, per neighbour, an EWMA correlation of its use with the victim's own (`UseLevels.comovement`):
pods that rise and fall together while nothing is contended share a driver (diurnal traffic, a synchronised job),
and one of them tipping a shared cap at their common peak is not one hurting the other.

This is the detector's innermost loop: every member, for every learning pod of every domain, on every tick
(bench/bench_detection.py). So nothing is kept twice where it is equal by construction, and every result is the
same, bit for bit, as keeping each victim's levels and each pair's six moments apart
(tests/detection/test_detection_use_levels.py holds it to such a plain implementation):

* victims that learned on exactly the same ticks have the same levels: they share one `LevelSet`, fed once a tick
  by the detector, which gives a copy to those that do not learn on a tick where the others do (a split);
* a pair's moments of the neighbour are its level, and those of the victim its own level, as long as both were fed
  on exactly the pair's ticks: the pair then keeps only its covariance (`_Joint`), and copies a level the first tick
  that breaks the equality (a fork).
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

from watchdog.detection.rings import UNATTRIBUTED, Baseline


def _first(value: float) -> Baseline:
    level = Baseline()
    level.update(value, alpha=0.0)  # a first value is the mean whatever the weight
    return level


class LevelSet:
    """Per member, its use's and its load's level over the baseline ticks of the victims that share this set."""

    __slots__ = ("use", "load", "fed")

    def __init__(self) -> None:
        self.use: dict[str, Baseline] = {}
        self.load: dict[str, Baseline] = {}
        self.fed = 0  # ticks fed: a set never fed is any new victim's, so new victims learning together share one

    def copy(self) -> LevelSet:
        other = LevelSet()
        other.use = {member: level.copy() for member, level in self.use.items()}
        other.load = {member: level.copy() for member, level in self.load.items()}
        other.fed = self.fed
        return other

    def feed(
        self,
        use: Mapping[str, float | None],
        share: Mapping[str, float],
        unattributed: float | None,
        *,
        alpha: float,
        load: bool,
    ) -> None:
        """One tick: every member's use and, with ``load``, its load (use × ``share``; ``unattributed`` is a load
        only)."""
        isfinite = math.isfinite
        uses, loads = self.use, self.load
        for member, value in use.items():
            if value is None or not isfinite(value):
                continue
            level = uses.get(member)
            if level is None:
                level = uses[member] = Baseline()
            level.update(value, alpha=alpha)
            if load:
                weighted = value * share.get(member, 1.0)
                if isfinite(weighted):
                    level = loads.get(member)
                    if level is None:
                        level = loads[member] = Baseline()
                    level.update(weighted, alpha=alpha)
        if load and unattributed is not None and isfinite(unattributed):
            level = loads.get(UNATTRIBUTED)
            if level is None:
                level = loads[UNATTRIBUTED] = Baseline()
            level.update(unattributed, alpha=alpha)
        self.fed += 1


class _Joint:
    """A pair's moments: the victim's own mean and variance, the neighbour's, and their covariance. ``own`` None:
    the victim's own level (`UseLevels._own`); ``its`` None: the neighbour's use level in the victim's set."""

    __slots__ = ("count", "cov", "own", "its")

    def __init__(self, own: Baseline | None, its: Baseline | None) -> None:
        self.count = 1
        self.cov = 0.0
        self.own = own
        self.its = its


class UseLevels:
    """One victim's levels (a `LevelSet`, maybe shared) and its pairs with every neighbour."""

    __slots__ = ("levels", "_own", "_joint", "_own_synced", "_its_synced")

    def __init__(self) -> None:
        self.levels = LevelSet()
        self._own = Baseline()  # the victim's own use on its pairs' ticks
        self._joint: dict[str, _Joint] = {}
        self._own_synced = 0  # pairs whose `own` is None
        self._its_synced = 0  # pairs whose `its` is None

    def learn(self, use: Mapping[str, float | None], *, alpha: float, own: float, skip: str) -> None:
        """One baseline tick of the victim whose use is ``own`` (its key ``skip``): how each neighbour moved with
        it. The caller feeds ``self.levels`` right after, with the same ``use``; a victim that learns without its
        own use is not given here but forked (`fork`)."""
        keep = 1.0 - alpha
        isfinite = math.isfinite
        joints, uses = self._joint, self.levels.use
        own_level = self._own
        own_count = own_level.count
        dx_synced = own - own_level.mean
        updated_synced = 0
        for member, value in use.items():
            if value is None or member == skip or not isfinite(value):
                continue
            joint = joints.get(member)
            if joint is None:
                level = uses.get(member)
                fresh = level is None or not level.count  # the feed after this call starts it with this value
                synced_own = own_count == 0
                joints[member] = _Joint(None if synced_own else _first(own), None if fresh else _first(value))
                self._its_synced += fresh
                if synced_own:
                    self._own_synced += 1
                    updated_synced += 1
                continue
            # The pair's covariance, deltas against the old means (as Baseline.update does for a variance).
            if joint.own is None:
                dx = dx_synced
                updated_synced += 1
            else:
                dx = joint.own.update(own, alpha=alpha)
            # its level before this tick's feed
            dy = value - uses[member].mean if joint.its is None else joint.its.update(value, alpha=alpha)
            joint.cov = keep * (joint.cov + alpha * dx * dy)
            joint.count += 1
        if updated_synced < self._own_synced:
            # A neighbour missing this tick: its pair's "own" stops following the victim's level here.
            for joint in joints.values():
                if joint.own is None and joint.count == own_count:
                    joint.own = own_level.copy()
                    self._own_synced -= 1
        own_level.update(own, alpha=alpha)

    def fork(self) -> None:
        """``self.levels`` is about to be fed on a tick without this victim's pairs: they keep copies of it."""
        if self._its_synced:
            uses = self.levels.use
            for member, joint in self._joint.items():
                if joint.its is None:
                    joint.its = uses[member].copy()
            self._its_synced = 0

    def known(self, what: str, *, min_count: int) -> dict[str, float]:
        """Members of one level ("use" or "load") seen on at least `min_count` of the victim's baseline ticks, with
        their level."""
        series = self.levels.use if what == "use" else self.levels.load
        return {m: b.mean for m, b in series.items() if b.count >= min_count}

    def comovement(self, *, min_count: int) -> dict[str, float]:
        """Per neighbour seen on at least `min_count` baseline ticks: the EWMA correlation of its use with the
        victim's own (0 when either barely moved)."""
        result: dict[str, float] = {}
        for member, joint in self._joint.items():
            if joint.count >= min_count:
                own = self._own if joint.own is None else joint.own
                its = self.levels.use[member] if joint.its is None else joint.its
                denom = math.sqrt(own.var * its.var)
                result[member] = joint.cov / denom if denom > 1e-12 else 0.0
        return result

    def forget(self, member: str) -> None:
        self.levels.use.pop(member, None)
        self.levels.load.pop(member, None)
        joint = self._joint.pop(member, None)
        if joint is not None:
            self._own_synced -= joint.own is None
            self._its_synced -= joint.its is None


Victims = Iterable[tuple[str, UseLevels, bool]]
"""A domain's pods: key, levels, and whether it learned (fed its signal baseline) this tick."""


def learn_domain(
    victims: Victims,
    use: Mapping[str, float | None],
    share: Mapping[str, float],
    unattributed: float | None,
    *,
    alpha: float,
    load: bool,
) -> None:
    """One tick of a domain whose victims learn apart: each learning victim's levels and pairs are fed. Victims that
    learned on exactly the same ticks share one `LevelSet`; new ones learning together start one."""
    groups: dict[int, tuple[LevelSet, list[tuple[str, UseLevels]], list[UseLevels]]] = {}
    new: LevelSet | None = None
    for key, levels, learning in victims:
        if learning and not levels.levels.fed:
            if new is None:
                new = levels.levels
            levels.levels = new
        group = groups.get(id(levels.levels))
        if group is None:
            group = groups[id(levels.levels)] = (levels.levels, [], [])
        if learning:
            group[1].append((key, levels))
        else:
            group[2].append(levels)
    for level_set, learners, idle in groups.values():
        if not learners:
            continue
        if idle:
            kept = level_set.copy()  # they did not learn this tick: their levels stop here, and are their own
            for levels in idle:
                levels.levels = kept
        for key, levels in learners:
            _pair(levels, use, key=key, alpha=alpha)
        level_set.feed(use, share, unattributed, alpha=alpha, load=load)


def learn_link(link: LevelSet, victims: Victims, use: Mapping[str, float | None], *, alpha: float) -> None:
    """One tick of a PCIe link with at least one learning victim: one set of levels (the link's use on the ticks it
    was not full) serves every victim, fed once a tick, even for one that did not learn (detection/pcie.py). A
    victim joins it when it first learns."""
    for key, levels, learning in victims:
        if levels.levels is not link:
            if not learning:
                continue
            levels.fork()
            levels.levels = link
        if learning:
            _pair(levels, use, key=key, alpha=alpha)
        else:
            levels.fork()
    link.feed(use, {}, None, alpha=alpha, load=False)


def _pair(levels: UseLevels, use: Mapping[str, float | None], *, key: str, alpha: float) -> None:
    own = use.get(key)
    if own is None:
        levels.fork()  # its levels are fed, its pairs (no own use to pair with) are not
    else:
        levels.learn(use, alpha=alpha, own=own, skip=key)
