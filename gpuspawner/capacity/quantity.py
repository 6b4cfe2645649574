"""Kubernetes resource quantities (``"8"``, ``"500m"``, ``"16Gi"``, ``"1e3"``).
Design notes: docs/capacity.md.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = ["QuantityError", "parse_quantity", "parse_count"]


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


_BINARY = {
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "Pi": 1 << 50,
    "Ei": 1 << 60,
}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"
_RE = re.compile(
    rf"^(?P<num>{_NUMBER})(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exp>[+-]?\d+)|(?P<dec>[numkMGTPE]?))$"
)


def parse_quantity(value: str | int | float) -> Fraction:
    """The exact value of a quantity; raises :class:`QuantityError` if malformed.

    JSON numbers are accepted too (some clients write ``allocatable: 8``).
    """
    if isinstance(value, bool):
        raise QuantityError(f"not a Kubernetes quantity: {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"not a Kubernetes quantity: {value!r}")
        return Fraction(value)
    if not isinstance(value, str):
        raise QuantityError(f"not a Kubernetes quantity: {value!r} (expected a string such as '8' or '16Gi')")
    m = _RE.match(value.strip())
    if m is None:
        raise QuantityError(f"not a Kubernetes quantity: {value!r} (expected e.g. '8', '500m', '16Gi', '1e3')")
    number = Fraction(m.group("num"))
    if m.group("bin"):
        return number * _BINARY[m.group("bin")]
    if m.group("exp") is not None:
        exp = int(m.group("exp"))
        if abs(exp) > 30:
            raise QuantityError(f"quantity exponent out of range: {value!r}")
        return number * Fraction(10) ** exp
    return number * _DECIMAL[m.group("dec") or ""]


def parse_count(value: str | int | float, *, round_up: bool = False) -> int:
    """A quantity as a whole count of devices, never negative.

    A fractional value cannot come from a valid extended resource; should one
    appear anyway we round conservatively: allocatable down (``round_up=False``:
    do not promise a device that is not there) and requests up (``round_up=True``:
    do not under-count what a pod holds).
    """
    if isinstance(value, str) and value.isdigit() and value.isascii():
        return int(value)  # the common case ("8"), without building a Fraction
    q = parse_quantity(value)
    n = math.ceil(q) if round_up else math.floor(q)
    return max(0, n)
