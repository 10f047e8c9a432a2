"""Preallocated rolling windows and baselines: the only memory detection keeps between ticks.

Pure (no I/O, no asyncio). A `SlotRing` holds one row per member (a pod) and one column per observed tick of a
domain, so two pods' series are always aligned by construction and a tick where a value is missing stays NaN
(never zero). Allocation happens only when a new member arrives or the window is resized on a policy reload, so
a steady tick costs a handful of array stores.
"""

from __future__ import annotations

import math
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

    def update(self, value: float, *, alpha: float) -> float:
        """Feed one value; the step δ against the old mean (0 for the first value), which a covariance needs."""
        delta = 0.0
        if self.count == 0:
            self.mean, self.var = value, 0.0
        else:
            # West's incremental EWMA variance: var ← (1−α)(var + α·δ²), δ measured against the old mean.
            delta = value - self.mean
            self.mean += alpha * delta
            self.var = (1.0 - alpha) * (self.var + alpha * delta * delta)
        self.count += 1
        return delta

    def copy(self) -> Baseline:
        other = Baseline()
        other.mean, other.var, other.count = self.mean, self.var, self.count
        return other

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


UNATTRIBUTED = "\x00unattributed"
"""The ring and level member for the use of processes no known pod owns (no pod key can start with NUL)."""
