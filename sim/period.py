"""The steady-state period read off microbatch completion times."""
from __future__ import annotations

import numpy as np

MAX_CYCLICITY = 8
REL_TOL = 1e-9


def steady_period(done: np.ndarray, tail: int) -> tuple[float, bool]:
    """(period, steady) from completion times ``done`` (one per microbatch, in order).

    Completions count in order (a microbatch is delivered once all earlier ones are: the
    running maximum), so replicas of unequal speed are paced by the slowest one.
    The last ``tail`` microbatches may finish early while the pipeline drains and are
    left out. Over the last half of the rest, find the smallest p <= 8 with
    ``done[m + p] - done[m]`` constant (to 1e-9 relative): the period is that / p.
    Otherwise return the average spacing over the window and ``steady=False``.
    """
    done = np.maximum.accumulate(np.asarray(done, dtype=float))  # in-order delivery
    M = len(done)
    if M < 2:
        return float(done[-1]) if M else 0.0, False
    hi = M - 1 - max(tail, 0)
    if hi < 2:
        hi = M - 1
    lo = hi // 2
    for p in range(1, MAX_CYCLICITY + 1):
        if hi - lo < 2 * p:
            break
        d = done[lo + p:hi + 1] - done[lo:hi + 1 - p]
        ref = float(d[-1])
        if np.all(np.abs(d - ref) <= REL_TOL * max(abs(ref), 1e-300)):
            return ref / p, True
    if hi > lo:
        return float(done[hi] - done[lo]) / (hi - lo), False
    return float(done[-1] - done[0]) / (M - 1), False
