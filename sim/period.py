"""The steady-state period read off microbatch completion times."""
from __future__ import annotations

import numpy as np

MAX_CYCLICITY = 8
REL_TOL = 1e-9
#: kept microbatches the late half of a run must span for its average rate to prove the
#: steady state sits at the floor
SATURATED_WINDOW = 32


def steady_period(done: np.ndarray, tail: int, floor: float = 0.0,
                  max_cyclicity: int = MAX_CYCLICITY, cycle: int = 1) -> tuple[float, bool]:
    """(period, steady) from completion times ``done`` (one per microbatch, in order).

    Completions count in order (the running maximum); the last ``tail`` microbatches are
    left out. The period is the smallest exact cycle p <= ``max_cyclicity`` over a
    trailing stretch of at least max(4p, 8, ``cycle``) microbatches (``cycle``: uneven
    replica shares repeat only every ``Plan.cycle``), never faster than ``floor`` (the
    busiest server's work per microbatch); a run already at ``floor`` on average over
    its late half is steady there; otherwise ``steady`` is False and the period an
    average spacing, never below ``floor``. The rules and why:
    docs/concepts/simulator.md, "The steady-state period".
    """
    done = np.maximum.accumulate(np.asarray(done, dtype=float))  # in-order delivery
    M = len(done)
    if M < 2:
        return max(float(done[-1]), floor) if M else 0.0, False
    hi = M - 1 - max(tail, 0)
    if hi < 2:  # nothing kept past the fill: the run's own rate
        return max(float(done[-1]) / M, floor), False
    for p in range(1, max_cyclicity + 1):
        need = max(4 * p, 8, cycle)
        if hi + 1 - p < need:
            break
        d = done[p:hi + 1] - done[:hi + 1 - p]
        ref = float(d[-1])
        bad = np.nonzero(np.abs(d - ref) > REL_TOL * max(abs(ref), 1e-300))[0]
        run = len(d) - (int(bad[-1]) + 1 if len(bad) else 0)
        if run >= need and ref > 0 and ref / p >= floor * (1 - REL_TOL):
            return ref / p, True
    lo = hi // 2
    avg = float(done[hi] - done[lo]) / (hi - lo)
    if hi - lo >= SATURATED_WINDOW and 0 < floor and avg <= floor * (1 + REL_TOL):
        return floor, True  # delivering at the bound no steady state can beat
    return max(avg, floor), False
