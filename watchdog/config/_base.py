"""The base every settings model shares: unknown fields are errors, so a typo in a policy file is refused; and a
number field takes a number, never a YAML boolean or an infinity.

Pydantic's lax mode reads ``true`` as 1 for an int or float field and accepts ``.inf``/``nan`` for a float
(pydantic docs, "Conversion Table" and ``ConfigDict.allow_inf_nan``): ``node_evictions_per_minute: .inf`` would
lift the eviction rate limit and ``priority_floor: true`` would mean 1. Strict mode would refuse those, but also the
text that environment overrides carry (``GPU_WATCHDOG_PUBLISHING__PORT=9100``, which must keep working) and enum
values given as strings; so non-finite numbers are refused by config, and booleans by the validator below.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and _boolean_for_number(field.annotation, value):
            raise ValueError("a number is required, not a boolean (true/false)")
        return value


def _boolean_for_number(annotation: Any, value: Any) -> bool:
    """True when ``value`` is, or holds where a number is due, a bool that ``annotation`` would take as a number."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _boolean_for_number(args[0], value)
    if origin in (typing.Union, types.UnionType):
        if isinstance(value, bool):
            return bool not in args and any(_is_number(arg) for arg in args)
        return any(_boolean_for_number(arg, value) for arg in args if arg is not type(None))
    if isinstance(value, bool):
        return _is_number(annotation)
    if origin in (list, tuple, set, frozenset) and args and isinstance(value, (list, tuple)):
        homogeneous = origin is not tuple or args[-1] is Ellipsis  # list[X], tuple[X, ...]
        item_types = [args[0]] * len(value) if homogeneous else args
        return any(_boolean_for_number(kind, item) for kind, item in zip(item_types, value))
    if origin is dict and isinstance(value, dict) and len(args) == 2:
        return any(_boolean_for_number(args[1], item) for item in value.values())
    return False


def _is_number(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, (int, float)) and not issubclass(annotation, bool)
