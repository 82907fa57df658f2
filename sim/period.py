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

    Completions count in order (a microbatch is delivered once all earlier ones are: the
    running maximum), so replicas of unequal speed are paced by the slowest one.
    The last ``tail`` microbatches may finish early while the pipeline drains and are
    left out. The run is periodic from some microbatch on when ``done[m + p] - done[m]``
    is constant (to 1e-9 relative): take the smallest p <= ``max_cyclicity`` (8; a plan
    with uneven replica shares repeats only every ``Plan.cycle`` microbatches and passes
    that) for which that holds over a
    trailing stretch of at least max(4p, 8, ``cycle``) microbatches; the period is that
    difference / p. ``cycle``: the run repeats only every ``cycle`` microbatches (uneven
    replica shares, ``Plan.cycle``), so a shorter p counts only if it holds over a whole
    cycle: shares (1, 15) deliver 15 microbatches 6 us apart and one with the one before
    it, and 14 equal steps of 6 us are no period of 6 us (the steady state is 90 us per
    16, 5.625 us). A periodic stretch faster than ``floor`` (the busiest server's work per
    microbatch, which every steady state must fit in one period) is a transient, not the
    steady state, and is rejected.

    A run that is not exactly periodic yet but whose average spacing over the last half
    of its kept microbatches (at least SATURATED_WINDOW of them) is at or below ``floor``
    is steady at ``floor``: it already delivers at the bound no steady state can beat.
    Two replicas whose loads differ by 1e-4 of each other settle only after thousands of
    rounds (the slower one paces every delivery only from then on), yet run at the
    slower one's rate throughout.

    Otherwise ``steady`` is False and the period is an honest figure, never below
    ``floor``: the average spacing over the last half of the kept microbatches when at
    least 3 are kept, else (the run never left its fill: ``tail`` >= M - 2, e.g. a
    schedule whose static order spans more rounds than there are microbatches, so every
    microbatch finishes in one burst) the run's own rate, last completion / M.
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
