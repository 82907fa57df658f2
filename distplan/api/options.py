"""User-facing option values that need the Problem to mean something."""
from __future__ import annotations

import math
import numbers

import numpy as np

from distplan.core.errors import DistplanError
from distplan.core.validate import check_instance
from distplan.costs.problem import Problem


def sensitivity_budget_value(text: str | float | None, problem: Problem) -> float | None:
    """A sensitivity budget given as an absolute value (``120``) or as a share of the
    all-lowest-precision sensitivity (lowest each op may use) (``"10%"``), as a number (None: no budget)."""
    check_instance("problem", problem, Problem, "build one with distplan.problem(workload, topology, ...)")
    if text is None:
        return None
    if isinstance(text, (bool, np.bool_)) or not isinstance(text, (str, numbers.Real)):
        raise DistplanError(f"sensitivity budget must be a finite number or a percentage like 10%, got {text!r} "
                            f"({type(text).__name__})"[:200])
    t = str(text).strip()
    try:
        if t.endswith("%"):
            frac = float(t[:-1]) / 100.0
            if not (frac >= 0 and math.isfinite(frac)):
                raise ValueError
            return frac * float(np.where(problem.op_allowed, problem.sensitivity, 0.0).max(axis=1).sum())
        value = float(t)
        if not math.isfinite(value):   # nan, inf: no budget is None (leave the flag out)
            raise ValueError
    except ValueError:
        raise DistplanError(f"sensitivity budget must be a finite number or a percentage like 10%, got {text!r}") from None
    if value < 0:
        raise DistplanError(f"sensitivity budget must be >= 0, got {text!r}")
    return value
