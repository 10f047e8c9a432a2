"""Reading and writing fields of pynvml structs without pynvml's per-access Python hooks.

Every pynvml struct derives from ``_PrintableStructure``, whose ``__getattribute__`` and ``__setattr__`` are
Python-level hooks (pynvml.py: the first decodes a bytes result to str, the second encodes a str argument to
bytes) that run on *every* attribute access, about 0.4 µs each. On a dense MIG node the sampler touches ~1,000
struct fields per tick (GPM metric slots, memory info), which made those hooks a third of its own CPU time, on a
real GPU as much as here.

A ctypes field is a data descriptor (``CField``) on the struct class. Calling its ``__get__``/``__set__``
directly reads and writes the same C memory the hooks end up reaching through ``super().__getattribute__`` and
``super().__setattr__``; the hooks only differ for bytes and str values, and the numeric and pointer fields read
through here are never either. The simulated NVML builds pynvml's own struct classes, so it takes this path too.
A type whose attribute is not such a descriptor (a plain Python stand-in, pynvml's friendly objects) falls back
to ordinary attribute access, so callers never need to know which kind of object NVML handed back.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Callable

Getter = Callable[[Any], Any]
Setter = Callable[[Any, Any], None]


def _descriptor(struct_type: type, name: str) -> Any:
    field = getattr(struct_type, name, None)
    return field if hasattr(field, "__get__") and hasattr(field, "__set__") else None


def field_getter(struct_type: type, name: str) -> Getter:
    """``get(struct)`` → ``struct.<name>``, through the class's field descriptor when it has one."""
    field = _descriptor(struct_type, name)
    return field.__get__ if field is not None else attrgetter(name)


def field_setter(struct_type: type, name: str) -> Setter:
    """``set(struct, value)`` ≡ ``struct.<name> = value``, through the class's field descriptor when it has one.

    Only for numeric and pointer fields: the descriptor does not encode a str as pynvml's hook would.
    """
    field = _descriptor(struct_type, name)
    if field is not None:
        return field.__set__

    def assign(struct: Any, value: Any) -> None:
        setattr(struct, name, value)

    return assign


class FieldReader:
    """Reads a fixed tuple of numeric fields from structs of any type, learning each type's getters once."""

    def __init__(self, *names: str) -> None:
        if not names:
            raise ValueError("FieldReader needs at least one field name")
        self._names = names
        self._by_type: dict[type, tuple[Getter, ...]] = {}

    def __call__(self, struct: Any) -> tuple[Any, ...]:
        getters = self._by_type.get(type(struct))
        if getters is None:
            getters = self._by_type[type(struct)] = tuple(field_getter(type(struct), n) for n in self._names)
        return tuple([get(struct) for get in getters])
