"""Preallocated rolling windows and baselines: the only memory detection keeps between ticks.

Pure (no I/O, no asyncio). A `SlotRing` holds one row per member (a pod) and one column per observed tick of a
domain, so two pods' series are always aligned by construction and a tick where a value is missing stays NaN
(never zero). Allocation happens only when a new member arrives or the window is resized on a policy reload, so
a steady tick costs a handful of array stores.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np


class SlotRing:
    """Aligned per-member rolling windows of floats (NaN = not observed)."""

    def __init__(self, capacity: int, *, slots: int = 4) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be ≥ 1, got {capacity}")
        self.capacity = capacity
        self._data = np.full((max(slots, 1), capacity), np.nan)
        self._rows: dict[str, int] = {}
        self._free: list[int] = list(range(self._data.shape[0] - 1, -1, -1))
        self._pos = -1
        self.ticks = 0  # columns written so far (saturates at nothing; compare with capacity)

    @property
    def members(self) -> tuple[str, ...]:
        return tuple(self._rows)

    def advance(self) -> None:
        """Open the next column; every member's value there is NaN until set."""
        self._pos = (self._pos + 1) % self.capacity
        self._data[:, self._pos] = np.nan
        self.ticks += 1

    def set(self, member: str, value: float | None) -> None:
        if value is None:
            return
        row = self._rows.get(member)
        if row is None:
            row = self._add(member)
        self._data[row, self._pos] = value

    def window(self, member: str, length: int) -> np.ndarray:
        """The member's last `length` values, oldest first (fewer at start-up); all NaN for an unknown member."""
        length = min(length, self.capacity, self.ticks)
        row = self._rows.get(member)
        if row is None or length <= 0:
            return np.full(max(length, 0), np.nan)
        start = self._pos - length + 1
        if start >= 0:
            return self._data[row, start : self._pos + 1].copy()
        return np.concatenate((self._data[row, start:], self._data[row, : self._pos + 1]))

    def forget(self, member: str) -> None:
        row = self._rows.pop(member, None)
        if row is not None:
            self._data[row, :] = np.nan
            self._free.append(row)

    def resized(self, capacity: int) -> SlotRing:
        """A copy with another capacity that keeps each member's most recent values."""
        other = SlotRing(capacity, slots=self._data.shape[0])
        keep = min(capacity, self.capacity, self.ticks)
        for _ in range(keep):
            other.advance()
        for member in self._rows:
            other._add(member)
            if keep:
                other._data[other._rows[member], :keep] = self.window(member, keep)
        return other

    def _add(self, member: str) -> int:
        if not self._free:
            old = self._data.shape[0]
            grown = np.full((old * 2, self.capacity), np.nan)
            grown[:old] = self._data
            self._data = grown
            self._free = list(range(old * 2 - 1, old - 1, -1))
        row = self._free.pop()
        self._data[row, :] = np.nan
        self._rows[member] = row
        return row


class Baseline:
    """Exponentially weighted mean and variance of one pod's signal, fed only on unhindered ticks."""

    __slots__ = ("mean", "var", "count")

    def __init__(self) -> None:
        self.mean = 0.0
        self.var = 0.0
        self.count = 0

    def update(self, value: float, *, alpha: float) -> None:
        if self.count == 0:
            self.mean, self.var = value, 0.0
        else:
            # West's incremental EWMA variance: var ← (1−α)(var + α·δ²), δ measured against the old mean.
            delta = value - self.mean
            self.mean += alpha * delta
            self.var = (1.0 - alpha) * (self.var + alpha * delta * delta)
        self.count += 1

    @property
    def std(self) -> float:
        return math.sqrt(self.var) if self.var > 0 else 0.0


def pearson(x: np.ndarray, y: np.ndarray, *, min_points: int) -> float | None:
    """Pearson correlation over the ticks where both are observed; None when too few or a series is flat."""
    both = np.isfinite(x) & np.isfinite(y)
    if int(both.sum()) < min_points:
        return None
    xs, ys = x[both], y[both]
    xd, yd = xs - xs.mean(), ys - ys.mean()
    denom = math.sqrt(float(xd @ xd) * float(yd @ yd))
    if denom < 1e-12:
        return None
    return float(xd @ yd) / denom


class UseLevels:
    """What a victim's neighbours used on the victim's own baseline ticks, and how they moved with the victim.

    The antagonist search compares a neighbour's use while the victim degrades with its use while the victim was
    unhindered. Inside the correlation window alone that comparison fails twice: a culprit that ramps up slowly
    has no "before" left in the window once the victim has degraded for a while, and a culprit that pauses a few
    ticks (a checkpoint) leaves too few steady ticks to re-judge it. These levels are fed only on the ticks that
    feed the victim's signal baseline, so they say what the neighbours used while the victim was *known* to be
    fine, however long ago that was. A series is named by (what, member): ("use", "ns/pod"), ("load", …).

    The same ticks give, per neighbour, an EWMA correlation of its use with the victim's own (`comovement`): pods
    that rise and fall together while nothing is contended share a driver (diurnal traffic, a synchronised job),
    and one of them tipping a shared cap at their common peak is not one hurting the other.
    """

    __slots__ = ("_levels", "_joint")

    def __init__(self) -> None:
        self._levels: dict[str, dict[str, Baseline]] = {}  # what → member → level
        self._joint: dict[str, list[float]] = {}  # member → [count, mean own, mean its, var own, var its, cov]

    def update(self, what: str, values: Mapping[str, float | None], *, alpha: float) -> None:
        series = self._levels.get(what)
        if series is None:
            series = self._levels[what] = {}
        keep = 1.0 - alpha
        isfinite = math.isfinite
        for member, value in values.items():
            if value is None or not isfinite(value):
                continue
            level = series.get(member)
            if level is None:
                level = series[member] = Baseline()
            # Baseline.update inlined: this runs for every neighbour of every learning pod on every tick.
            if level.count == 0:
                level.mean, level.var = value, 0.0
            else:
                delta = value - level.mean
                level.mean += alpha * delta
                level.var = keep * (level.var + alpha * delta * delta)
            level.count += 1

    def update_comovement(
        self, own: float, others: Mapping[str, float | None], *, alpha: float, skip: str | None = None
    ) -> None:
        """``others``: every member's use; ``skip``: the victim's own key among them."""
        keep = 1.0 - alpha
        isfinite = math.isfinite
        joints = self._joint
        for member, value in others.items():
            if value is None or member == skip or not isfinite(value):
                continue
            joint = joints.get(member)
            if joint is None:
                joints[member] = [1.0, own, value, 0.0, 0.0, 0.0]
                continue
            # West's incremental EWMA (co)variances, deltas against the old means (as Baseline.update).
            count, mean_own, mean_its, var_own, var_its, cov = joint
            dx, dy = own - mean_own, value - mean_its
            joint[:] = (
                count + 1,
                mean_own + alpha * dx,
                mean_its + alpha * dy,
                keep * (var_own + alpha * dx * dx),
                keep * (var_its + alpha * dy * dy),
                keep * (cov + alpha * dx * dy),
            )

    def share_levels(self, other: UseLevels) -> None:
        """Read and feed ``other``'s levels from now on (not its comovement): for a domain whose use while a victim
        was fine is one thing for every victim, the link's use while it was not full (detection/pcie.py)."""
        self._levels = other._levels

    def known(self, what: str, *, min_count: int) -> dict[str, float]:
        """Members of one series seen on at least `min_count` of the victim's baseline ticks, with their level."""
        return {m: b.mean for m, b in self._levels.get(what, {}).items() if b.count >= min_count}

    def comovement(self, *, min_count: int) -> dict[str, float]:
        """Per neighbour seen on at least `min_count` baseline ticks: the EWMA correlation of its use with the
        victim's own (0 when either barely moved)."""
        result: dict[str, float] = {}
        for member, (count, _, _, var_own, var_its, cov) in self._joint.items():
            if count >= min_count:
                denom = math.sqrt(var_own * var_its)
                result[member] = cov / denom if denom > 1e-12 else 0.0
        return result

    def forget(self, member: str) -> None:
        for series in self._levels.values():
            series.pop(member, None)
        self._joint.pop(member, None)
