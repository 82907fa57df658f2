"""Numeric precisions: names, storage sizes and unit round-off (docs/HARDWARE.md)."""
from __future__ import annotations

from dataclasses import dataclass

from distplan.core.errors import DistplanError


@dataclass(frozen=True)
class Precision:
    """A numeric format: ``bytes_per_elem`` of storage, ``unit_roundoff`` (relative step)."""

    name: str
    bytes_per_elem: int
    unit_roundoff: float
    is_float: bool = True


#: Highest to lowest fidelity; index order is used for "highest precision" ties.
PRECISIONS: dict[str, Precision] = {
    "fp32": Precision("fp32", 4, 2.0**-24),
    "tf32": Precision("tf32", 4, 2.0**-11),
    "bf16": Precision("bf16", 2, 2.0**-8),
    "fp16": Precision("fp16", 2, 2.0**-11),
    "fp8": Precision("fp8", 1, 2.0**-4),
    # int8 with a per-tensor scale: uniform step 2/255 of the range, error std step/sqrt(12)
    "int8": Precision("int8", 1, (2.0 / 255.0) / (12.0**0.5), is_float=False),
}

PRECISION_NAMES: tuple[str, ...] = tuple(PRECISIONS)


def precision(name: str) -> Precision:
    """Look up a precision by name, with an error that lists the valid names."""
    try:
        return PRECISIONS[name]
    except KeyError:
        raise DistplanError(
            f"unknown precision {name!r}; use one of {', '.join(PRECISION_NAMES)}"
        ) from None


def parse_precisions(text: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Parse 'fp16,int8' into a validated tuple ordered from highest to lowest fidelity."""
    names = [s.strip() for s in text.split(",")] if isinstance(text, str) else list(text)
    names = [n for n in names if n]
    if not names:
        raise DistplanError("no precision given; use e.g. --precisions fp16,int8")
    for n in names:
        precision(n)
    return tuple(sorted(set(names), key=PRECISION_NAMES.index))
