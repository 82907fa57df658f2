"""Human units in file keys (``GBps``, ``GiB``, ``us``) to SI floats and back, exactly.

Numbers read from files arrive as ``int`` or ``decimal.Decimal`` (see
``topologies.textformat``), so ``to_si`` multiplies the decimal the user wrote by the
unit, exactly, and rounds once. ``from_si`` writes a float's shortest decimal divided by
the unit, exactly (units are powers of 2 or 10, so the quotient terminates), which makes
``to_si(from_si(x, u), u) == x`` for every finite float ``x``.
"""
from __future__ import annotations

import math
from decimal import Context, Decimal

from distplan.core.errors import DistplanError

_CTX = Context(prec=400)

GIGA = Decimal(10**9)
TERA = Decimal(10**12)
GIB = Decimal(2**30)
MIB = Decimal(2**20)
MICRO = Decimal("1e-6")
NANO = Decimal("1e-9")
ONE = Decimal(1)


def as_decimal(value: object, where: str) -> Decimal:
    """The exact decimal of a number read from a file; anything else is an error naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise DistplanError(f"{where} must be a number, got {brief(value)}")
    d = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    if not d.is_finite():
        raise DistplanError(f"{where} must be a finite number, got {brief(value)}")
    return d


def to_si(value: object, unit: Decimal, where: str) -> float:
    """``value`` (in ``unit``) as an SI float, rounded once."""
    d = as_decimal(value, where)
    try:
        return float(_CTX.multiply(d, unit))
    except ArithmeticError:   # decimal.Overflow: beyond any exponent a float (or a decimal here) holds
        raise DistplanError(f"{where} is out of range, got {brief(d)}") from None


def from_si(x: float, unit: Decimal) -> Decimal:
    """The SI float ``x`` expressed exactly in ``unit``."""
    if not math.isfinite(x):
        raise DistplanError(f"cannot write the non-finite value {x!r}")
    return _CTX.divide(Decimal(repr(float(x))), unit)


def number_text(d: Decimal) -> str:
    """A decimal as number text valid in both JSON and YAML (no leading '+', no bare '.')."""
    d = d.normalize(_CTX)
    if d == d.to_integral_value() and abs(d) < Decimal(10) ** 21:
        return str(int(d))
    if -7 <= d.adjusted() <= 21:
        return format(d, "f")
    return format(d, "e")


def shortest(x: float, options: list[tuple[str, Decimal]]) -> tuple[str, Decimal]:
    """The (key, value) among unit ``options`` whose text is shortest (first on ties)."""
    best = None
    for key, unit in options:
        v = from_si(x, unit)
        if best is None or len(number_text(v)) < len(number_text(best[1])):
            best = (key, v)
    assert best is not None
    return best


def brief(x: object, max_chars: int = 60) -> str:
    """A value as it should appear in an error message: numbers short (``1e+300``, not
    301 digits), anything else its repr, cut to ``max_chars``."""
    if isinstance(x, bool) or x is None:
        return repr(x)
    if isinstance(x, int):
        if abs(x) < 10**15:
            return str(x)
        digits = str(abs(x))
        return f"{'-' if x < 0 else ''}{digits[0]}.{digits[1:6]}e+{len(digits) - 1}"
    if isinstance(x, float):
        return format(x, ".6g") if math.isfinite(x) else repr(x)
    if isinstance(x, Decimal):
        return format(x, ".6g")
    text = repr(x)
    return text if len(text) <= max_chars else text[:max_chars - 3] + "..."
