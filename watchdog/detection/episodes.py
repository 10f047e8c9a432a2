"""The interference detector's memory between ticks: per domain its rings, per pod its baseline and open episode.

Pure (no I/O). Kept apart from `interference` so the per-tick logic reads without the bookkeeping. An *episode*
is one victim latched to one culprit; a finding is every open episode of a (domain, culprit). An episode that
ends is remembered as a `ClosedEpisode` for `merge_gap_ticks`, so the same culprit back soon after continues the
finding (same first tick) instead of starting one whose persistence counts from zero again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from watchdog.detection.antagonist import Series
from watchdog.detection.blind import BlindEpisode
from watchdog.detection.domain_types import Domain
from watchdog.detection.levels import LevelSet, UseLevels
from watchdog.detection.rings import Baseline, SlotRing
from watchdog.detection.scheduler_model import SchedulerEvidence
from watchdog.model import PodRef


@dataclass(slots=True)
class Episode:
    """A victim latched to its antagonist: stays open while the victim keeps suffering and the antagonist is busy."""

    culprit: PodRef
    first_tick: int
    since: float
    correlation: float
    rise: float
    last_observed: int  # last tick both the victim's signal and the culprit's use were read
    excluded_rise: float = 0.0  # power: GPU share the victim's tenant and unowned processes added meanwhile
    low: int = 0  # bits of the last release_window ticks on which the culprit's use was low, newest in bit 0


@dataclass(frozen=True, slots=True)
class ClosedEpisode:
    """The last episode of a (domain, culprit) to end: a re-latch within merge_gap_ticks continues it."""

    first_tick: int
    since: float
    closed_tick: int


@dataclass(slots=True)
class PodState:
    baseline: Baseline
    source: str
    flags: int = 0  # outlier bits of the last M observed ticks, newest in bit 0
    last_seen: int = 0
    signal_tick: int | None = None  # last tick its signal had a value
    fair: float | None = None  # its water-filling fair share at the last judged tick (time-sliced / gi)
    own_drop_tick: int | None = None  # when its signal left the baseline while the device had idle capacity
    z_score: float = 0.0
    deviation: float = 0.0
    episode: Episode | None = None
    blind: BlindEpisode | None = None  # degraded while no neighbour's use was known (detection/blind.py)
    levels: UseLevels = field(default_factory=UseLevels)  # the domain's use on this pod's baseline ticks
    learned_tick: int | None = None  # last tick its baseline learned (uncontended, active)


@dataclass(slots=True)
class DomainState:
    signal: SlotRing
    use: SlotRing  # activity relative to the pod's own share
    # power: activity × share, the part of the domain it drives (GPU fraction), + unattributed; mps: each client's own
    # SM activity against its slice (its `use` is its DRAM share, which says nothing of whether it was working)
    load: SlotRing
    flag: SlotRing
    domain: Domain
    last_tick: int
    busy: bool = False  # contended at its last tick
    pods: dict[str, PodState] = field(default_factory=dict)
    closed: dict[str, ClosedEpisode] = field(default_factory=dict)  # culprit key → its last ended episode
    scheduler: SchedulerEvidence = field(default_factory=SchedulerEvidence)  # time-sliced: max-min or proportional
    link_levels: LevelSet | None = None  # pcie: the link's use on its pods' baseline ticks, shared by all of them

    @property
    def rings(self) -> tuple[SlotRing, ...]:
        return (self.signal, self.use, self.load, self.flag)

    @property
    def series(self) -> Series:
        return Series(signal=self.signal, use=self.use, load=self.load, flag=self.flag)
