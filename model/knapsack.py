"""Multiple-choice knapsacks over per-op options, pure (numpy and the standard library).

Each op v has a base point and options that save something (seconds ``dt``, and for the
joint knapsack bytes ``dm``) for added sensitivity ``ds``. The least added sensitivity
that saves a given amount is read off a Pareto front of (saved, added) points
(:func:`extend_front`, :func:`segment_fronts`, :func:`front_choice`), bounded from below
by its LP relaxation (:func:`lp_min_sensitivity` over :class:`Steps`), or, with two
resources at once, found exactly by :func:`joint_choice`. Nothing here knows about a
Problem or a Pyomo model (model.savings builds the options from a Problem).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Steps:
    """Convex-hull steps of every op on one device kind, sorted by slope ds/dt.

    ``base_time[v]``, ``base_sens[v]``, ``base_q[v]``: the least-sensitive point (ties:
    fastest); step i belongs to op ``op[i]``, saves ``dt[i]`` s for ``ds[i]`` sensitivity
    and moves that op to precision ``to_q[i]``."""

    base_time: np.ndarray
    base_sens: np.ndarray
    base_q: np.ndarray
    op: np.ndarray
    dt: np.ndarray
    ds: np.ndarray
    to_q: np.ndarray

    @property
    def slope(self) -> np.ndarray:
        return self.ds / self.dt


def hull_steps(points_by_op: Sequence[Sequence[tuple[float, float, int]]]) -> Steps:
    """Lower convex hull of each op's points (sensitivity, time_s, q), sorted by
    sensitivity, as :class:`Steps`; an op without points gets an infinite base."""
    V = len(points_by_op)
    base_t, base_s, base_q = np.zeros(V), np.zeros(V), np.zeros(V, dtype=np.int64)
    steps = []
    for v, pts in enumerate(points_by_op):
        if not pts:
            base_t[v], base_s[v], base_q[v] = math.inf, math.inf, 0
            continue
        s0, t0, q0 = pts[0]
        base_t[v], base_s[v], base_q[v] = t0, s0, q0
        cur_s, cur_t = s0, t0
        while True:   # next hull point: the least slope ds/dt among strictly faster points
            best = None
            for s, t, q in pts:
                if t < cur_t:
                    slope = (s - cur_s) / (cur_t - t)
                    if best is None or slope < best[0] - 1e-15 or (abs(slope - best[0]) <= 1e-15 and t < best[2]):
                        best = (slope, s, t, q)
            if best is None:
                break
            _, s, t, q = best
            steps.append((max(0.0, s - cur_s) / (cur_t - t), v, cur_t - t, max(0.0, s - cur_s), q))
            cur_s, cur_t = s, t
    steps.sort(key=lambda x: (x[0], x[1]))
    arr = np.array(steps, dtype=float).reshape(-1, 5)
    return Steps(base_t, base_s, base_q, arr[:, 1].astype(np.int64), arr[:, 2], arr[:, 3], arr[:, 4].astype(np.int64))


def lp_min_sensitivity(steps: Steps, in_segment: np.ndarray, need_s: float) -> float:
    """LP relaxation of the knapsack over the steps whose op is ``in_segment`` (a mask per
    step): steps by slope, the last one fractionally; a lower bound on the least added
    sensitivity saving ``need_s``; inf if even all steps save less."""
    if need_s <= 0:
        return 0.0
    cs, cz = np.cumsum(steps.dt * in_segment), np.cumsum(steps.ds * in_segment)
    r = int(np.searchsorted(cs, need_s))
    if r >= len(cs):
        return math.inf
    return float(cz[r] - (cs[r] - need_s) * steps.slope[r])


def extend_front(saved: np.ndarray, sens: np.ndarray, options) -> tuple[np.ndarray, np.ndarray]:
    """Pareto front (saved ascending, sens ascending) after one more op with ``options``
    [(dt, ds, ...)]."""
    if not options:
        return saved, sens
    a = np.concatenate([saved] + [saved + o[0] for o in options])
    b = np.concatenate([sens] + [sens + o[1] for o in options])
    order = np.lexsort((-a, b))           # sensitivity ascending, then saved descending
    a, b = a[order], b[order]
    prev = np.concatenate([[-math.inf], np.maximum.accumulate(a)[:-1]])
    keep = a > prev
    return a[keep], b[keep]


def segment_fronts(mat: np.ndarray, sub: np.ndarray, want: np.ndarray, opts: list, max_front: int
                   ) -> tuple[dict[tuple[int, int], tuple[np.ndarray, np.ndarray]], set[tuple[int, int]]]:
    """Pareto fronts (saved, added sensitivity) of every segment i - j (rows of the
    boolean ``mat``; ``sub[i, j]``: row j is a subset of row i) with ``want[i, j]``, each
    grown from the largest already-built segment i' - j with i' a subset of i. Returns
    (fronts, capped): segments whose front outgrew ``max_front`` points are in ``capped``."""
    N, V = mat.shape
    sizes = mat.sum(axis=1)
    fronts, capped = {}, set()
    for j in range(N):
        cand = np.nonzero(want[:, j])[0]
        cand = cand[np.argsort(sizes[cand], kind="stable")]
        done: list[int] = []
        for i in cand:
            i = int(i)
            if i == j:
                fronts[(i, j)] = (np.zeros(1), np.zeros(1))
                done.append(i)
                continue
            prev = [k for k in done if sub[i, k]]
            if not prev:
                continue
            k = max(prev, key=lambda x: sizes[x])
            if (k, j) in capped:
                capped.add((i, j))
                done.append(i)
                continue
            a, b = fronts[(k, j)]
            for v in np.nonzero(mat[i] & ~mat[k])[0]:
                a, b = extend_front(a, b, opts[int(v)])
                if len(a) > max_front:
                    break
            if len(a) > max_front:
                capped.add((i, j))
            else:
                fronts[(i, j)] = (a, b)
            done.append(i)
    return fronts, capped


def front_choice(options_by_op: dict, need_s: float) -> dict[int, int] | None:
    """Exact least-sensitivity choice {op: option index} saving >= need_s seconds among
    ``options_by_op`` (op -> [(dt, ds, q)]); None if no choice saves enough."""
    front = {0.0: (0.0, ())}                # saved -> (sens, choices), Pareto-pruned
    for v, opts in options_by_op.items():
        new = dict(front)
        for a, (b, ch) in front.items():
            for k, (dt, ds, _) in enumerate(opts):
                key = a + dt
                if key not in new or new[key][0] > b + ds:
                    new[key] = (b + ds, ch + ((v, k),))
        items = sorted(new.items(), key=lambda x: (x[1][0], -x[0]))
        front, best = {}, -math.inf
        for a, val in items:
            if a > best:
                front[a], best = val, a
    ok = [(b, ch) for a, (b, ch) in front.items() if a >= need_s * (1 - 1e-12)]
    if not ok:
        return None
    return dict(min(ok, key=lambda x: x[0])[1])


def joint_choice(options_by_op: dict, need_s: float, need_bytes: float, max_states: int = 300):
    """Exact least added sensitivity of a choice {op: option index} among
    ``options_by_op`` (op -> [(dt, dm, ds, q)]) saving >= need_s seconds and >= need_bytes
    bytes together: (sensitivity, choice), (inf, None) if none does, None if the Pareto
    front outgrew ``max_states`` (the caller then falls back to a weaker bound)."""
    nt, nm = max(need_s, 0.0), max(need_bytes, 0.0)
    # state key: savings capped at the need plus what later options can still lose (so
    # states that are surely enough merge); the value keeps the true sums, which the final
    # test reads (capping them would let rounding absorb a tiny need)
    states = {(0.0, 0.0): (0.0, (), 0.0, 0.0)}
    items_ = list(options_by_op.items())
    lose_t = [max([0.0] + [-o[0] for o in opts]) for _, opts in items_]
    lose_m = [max([0.0] + [-o[1] for o in opts]) for _, opts in items_]
    for n, (v, opts) in enumerate(items_):
        ct, cm = nt + math.fsum(lose_t[n + 1:]), nm + math.fsum(lose_m[n + 1:])
        new: dict = {}
        for (a, b), val in states.items():
            key = (min(a, ct), min(b, cm))
            if key not in new or new[key][0] > val[0]:
                new[key] = val
        for (a, b), (s, ch, ta, tb_) in states.items():
            for k, (dt, dm, ds, _) in enumerate(opts):
                key = (min(a + dt, ct), min(b + dm, cm))
                old = new.get(key)
                if old is None or old[0] > s + ds:
                    new[key] = (s + ds, ch + ((v, k),), ta + dt, tb_ + dm)
        # prune: drop a state another beats in both savings at no more sensitivity
        items = sorted(new.items(), key=lambda x: (x[1][0], -x[0][0], -x[0][1]))
        kept: list = []
        for (a, b), val in items:
            if any(a2 >= a and b2 >= b for (a2, b2), _ in kept):
                continue
            kept.append(((a, b), val))
            if len(kept) > max_states:
                return None
        states = dict(kept)
    ok = [val for val in states.values() if val[2] >= nt * (1 - 1e-12) and val[3] >= nm * (1 - 1e-12)]
    if not ok:
        return math.inf, None
    s, ch = min(ok, key=lambda x: x[0])[:2]
    return s, dict(ch)
