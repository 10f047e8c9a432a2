"""Kubernetes resource quantities ("4", "500m", "10Gi", "1e3") as numbers, and refusal of anything else.

The audit reads quota, LimitRange and request values as stored; a real API server refuses a malformed quantity at
admission, but objects written by older servers, by tools bypassing validation or by a fake may still hold one, and
the audit must name the bad value instead of failing. Grammar: apimachinery/pkg/api/resource/quantity.go (a signed
decimal number, then a binary suffix Ki…Ei, a decimal suffix n u m k M G T P E, or an exponent e/E).
Pure: no I/O.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal(10**3),
            "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15),
            "E": Decimal(10**18)}


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """``"10Gi"`` → 10737418240; raises QuantityError naming the value."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise QuantityError(f"{value!r} is not a quantity")
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        raise QuantityError(f"{value!r} is not a quantity (expected a number with an optional unit, e.g. 4 or 10Gi)")
    number, suffix = match.groups()
    try:
        amount = Decimal(number)
    except InvalidOperation as error:  # the pattern admits only decimals; kept for safety
        raise QuantityError(f"{value!r} is not a quantity") from error
    if suffix is None:
        return amount
    if suffix in _BINARY:
        return amount * _BINARY[suffix]
    if suffix in _DECIMAL:
        return amount * _DECIMAL[suffix]
    return amount * (Decimal(10) ** int(suffix[1:]))


def format_quantity(amount: Decimal) -> str:
    """A whole number without exponent (``4``), else the Gi/Mi form when exact, else the plain decimal."""
    if amount == amount.to_integral_value():
        whole = int(amount)
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20)):
            if whole >= size and whole % size == 0:
                return f"{whole // size}{suffix}"
        return str(whole)
    return format(amount.normalize(), "f")
