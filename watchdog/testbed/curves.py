"""Demand curves: how much memory, SM, DRAM bandwidth and PCIe a workload asks for at each tick.

A scenario describes load the way people describe it ("8 GiB, stepping to 30 GiB at tick 100, busy in the
afternoon"), so a curve is a base level, steps, a ramp, a sine (diurnal swing), seeded Gaussian noise and active
windows. Evaluation is a pure function of the tick: noise comes from fixed-size blocks drawn from a numpy
Generator seeded by (scenario seed, pod, resource, block), so any tick can be evaluated in any order, twice, on
any machine, and give the same number. That is what makes the whole node a pure function of the clock.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

_NOISE_BLOCK = 256
_QUANTITY = re.compile(r"^\s*([0-9.]+(?:[eE][-+]?[0-9]+)?)\s*([KMGTP]i?)?B?\s*$")
_UNITS = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
          "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}


def parse_quantity(value: object) -> object:
    """Numbers pass; strings like ``8Gi``, ``40GiB``, ``1.5G`` or ``8e9`` become floats (Ki = 1024, K = 1000)."""
    if isinstance(value, str):
        match = _QUANTITY.match(value)
        if not match:
            raise ValueError(f"{value!r} is not a number or a quantity like 8Gi / 1.5G")
        number, unit = match.groups()
        return float(number) * (_UNITS[unit] if unit else 1.0)
    return value


Quantity = Annotated[float, BeforeValidator(parse_quantity)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Step(_Strict):
    at: int = Field(ge=0)
    value: Quantity


class Ramp(_Strict):
    from_tick: int = Field(ge=0)
    to_tick: int = Field(ge=0)
    to: Quantity

    @model_validator(mode="after")
    def _ordered(self) -> Ramp:
        if self.to_tick <= self.from_tick:
            raise ValueError("to_tick must be after from_tick")
        return self


class Sine(_Strict):
    period: float = Field(gt=0)  # ticks
    amplitude: Quantity
    phase: float = 0.0  # ticks


class Curve(_Strict):
    """base, then steps (last ``at`` ≤ tick wins), a ramp from its start level to ``to``, plus sine and noise."""

    base: Quantity = 0.0
    steps: list[Step] = []
    ramp: Ramp | None = None
    sine: Sine | None = None
    noise: Quantity = Field(default=0.0, ge=0)  # standard deviation, same unit as base
    active: list[tuple[int, int]] | None = None  # [start, end) windows; outside them the demand is 0

    @model_validator(mode="after")
    def _windows(self) -> Curve:
        for start, end in self.active or ():
            if end <= start:
                raise ValueError(f"active window [{start}, {end}] must end after it starts")
        self.steps = sorted(self.steps, key=lambda step: step.at)
        return self

    def level(self, tick: int) -> float:
        """base and steps only."""
        value = self.base
        for step in self.steps:
            if step.at > tick:
                break
            value = step.value
        return value


class CurveEvaluator:
    """Evaluates one curve for one pod and resource, deterministically from ``seed_parts``."""

    __slots__ = ("_curve", "_seed", "_blocks", "_lower", "_upper", "_constant")

    def __init__(self, curve: Curve, *, seed_parts: tuple[int, ...], lower: float = 0.0,
                 upper: float = math.inf) -> None:
        self._curve = curve
        self._seed = seed_parts
        self._blocks: dict[int, np.ndarray] = {}
        self._lower = lower
        self._upper = upper
        simple = not (curve.steps or curve.ramp or curve.sine or curve.noise or curve.active)
        self._constant = min(max(curve.base, lower), upper) if simple else None

    def __call__(self, tick: int) -> float:
        if self._constant is not None:
            return self._constant
        curve = self._curve
        if curve.active is not None and not any(start <= tick < end for start, end in curve.active):
            return 0.0
        value = self._ramped(tick)
        if curve.sine is not None:
            value += curve.sine.amplitude * math.sin(2.0 * math.pi * (tick + curve.sine.phase) / curve.sine.period)
        if curve.noise:
            value += curve.noise * self._normal(tick)
        return min(max(value, self._lower), self._upper)

    def _ramped(self, tick: int) -> float:
        curve, ramp = self._curve, self._curve.ramp
        if ramp is None or tick < ramp.from_tick:
            return curve.level(tick)
        if tick >= ramp.to_tick:
            later = [step for step in curve.steps if ramp.to_tick < step.at <= tick]
            return later[-1].value if later else ramp.to
        start = curve.level(ramp.from_tick)
        return start + (ramp.to - start) * (tick - ramp.from_tick) / (ramp.to_tick - ramp.from_tick)

    def _normal(self, tick: int) -> float:
        block, offset = divmod(tick, _NOISE_BLOCK)
        values = self._blocks.get(block)
        if values is None:
            generator = np.random.default_rng([*self._seed, block])
            values = self._blocks[block] = generator.standard_normal(_NOISE_BLOCK)
            if len(self._blocks) > 64:  # bound memory on very long runs; any block can be redrawn identically
                self._blocks.pop(next(iter(self._blocks)))
        return float(values[offset])
