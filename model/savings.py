"""What a lower precision saves: per op on one device kind, the options (seconds or bytes
saved, sensitivity added) the knapsacks of model.knapsack choose from.

Every op's base is its least-sensitive precision that kind c runs and that fits
``cap_bytes`` alone (the MILP's cells, model.build.allowed_cells); ties go to the fastest.
"""
from __future__ import annotations

import math

import numpy as np

from distplan.costs.problem import Problem
from distplan.model.knapsack import Steps, hull_steps


def usable(problem: Problem, v: int, q: int, c: int, cap_bytes: float) -> bool:
    """Kind c runs precision q and op v alone fits ``cap_bytes`` at q (one microbatch)."""
    return bool(problem.supported[q, c]) and math.isfinite(problem.op_time_s(v, q, c)) and \
        problem.static_bytes[v, q] + problem.act_bytes[v, q] <= cap_bytes


def _points(problem: Problem, v: int, c: int, cap_bytes: float) -> list[tuple[float, float, int]]:
    """(sensitivity, time_s, q) of op v's usable precisions on kind c, sorted."""
    return sorted((float(problem.sensitivity[v, q]), problem.op_time_s(v, q, c), q)
                  for q in range(len(problem.precisions)) if usable(problem, v, q, c, cap_bytes))


def precision_steps(problem: Problem, c: int, cap_bytes: float = math.inf) -> Steps:
    """Lower convex hull of (time, sensitivity) per op on kind ``c``, as sorted steps."""
    return hull_steps([_points(problem, v, c, cap_bytes) for v in range(problem.n_ops)])


def precision_options(problem: Problem, c: int, cap_bytes: float = math.inf
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
    """Per op on kind ``c``: base time t0, base sensitivity s0 and base precision q0, and
    its options [(dt, ds, q)] that save time (dt > 0), without the ones another option
    dominates (saves no less for less)."""
    V = problem.n_ops
    t0, s0, q0 = np.full(V, math.inf), np.full(V, math.inf), np.zeros(V, dtype=np.int64)
    opts: list = []
    for v in range(V):
        pts = _points(problem, v, c, cap_bytes)
        if not pts:
            opts.append([])
            continue
        s0[v], t0[v], q0[v] = pts[0]
        mine, best_t = [], t0[v]
        for s, t, q in pts[1:]:           # by sensitivity: keep each strictly faster one
            if t < best_t:
                mine.append((t0[v] - t, s - s0[v], q))
                best_t = t
        opts.append(mine)
    return t0, s0, q0, opts


def memory_options(problem: Problem, c: int, cap_bytes: float, base_q: np.ndarray,
                   n_inflight: float) -> tuple[np.ndarray, list]:
    """Per op on kind c: bytes m0 at its base precision (static + n_inflight x act) and the
    options [(dm, ds, q)] that save bytes (dm > 0) for ds = s[v,q] - s[v,base] >= 0,
    undominated, among the precisions of precision_options."""
    V, Q = problem.n_ops, len(problem.precisions)
    m0 = np.array([problem.static_bytes[v, base_q[v]] + n_inflight * problem.act_bytes[v, base_q[v]]
                   for v in range(V)])
    opts = []
    for v in range(V):
        s0 = float(problem.sensitivity[v, base_q[v]])
        pts = sorted((float(problem.sensitivity[v, q]) - s0,
                      float(problem.static_bytes[v, q] + n_inflight * problem.act_bytes[v, q]), q) for q in range(Q)
                     if q != base_q[v] and problem.sensitivity[v, q] >= s0 and usable(problem, v, q, c, cap_bytes))
        mine, best = [], m0[v]
        for ds, m, q in pts:
            if m < best:
                mine.append((m0[v] - m, ds, q))
                best = m
        opts.append(mine)
    return m0, opts


def joint_options(problem: Problem, c: int, cap_bytes: float, t0: np.ndarray, q0: np.ndarray,
                  n_inflight: float) -> list:
    """Per op on kind c: [(dt, dm, ds, q)] for every usable precision q other than its base
    q0 (dt seconds and dm bytes saved, ds sensitivity added; dt, dm may be negative)."""
    out = []
    for v in range(problem.n_ops):
        b = int(q0[v])
        mb = problem.static_bytes[v, b] + n_inflight * problem.act_bytes[v, b]
        mine = []
        if math.isfinite(t0[v]):
            for q in range(len(problem.precisions)):
                if q == b or not usable(problem, v, q, c, cap_bytes):
                    continue
                dt = t0[v] - problem.op_time_s(v, q, c)
                dm = mb - (problem.static_bytes[v, q] + n_inflight * problem.act_bytes[v, q])
                if dt > 0 or dm > 0:
                    mine.append((float(dt), float(dm), float(problem.sensitivity[v, q] - problem.sensitivity[v, b]), q))
        out.append(mine)
    return out
