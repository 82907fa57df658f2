"""The relative optimality gap, one formula for every plan space and the solver's log."""
from __future__ import annotations

import math


def gap(objective: float, bound: float) -> float:
    """(objective - bound) / |objective|, never below 0: 0 when the bound reaches the
    objective (both 0 included), inf when either is not finite or the objective is 0
    with a bound below it."""
    if bound >= objective:
        return 0.0
    if not (math.isfinite(objective) and math.isfinite(bound)) or objective == 0:
        return math.inf
    return (objective - bound) / abs(objective)


def within_gap(objective: float, bound: float, rel_gap: float) -> bool:
    """A positive, finite objective proven within ``rel_gap`` of ``bound``."""
    return 0 < objective < math.inf and gap(objective, bound) <= rel_gap
