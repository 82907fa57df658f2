"""The period under a sensitivity budget: a proven lower bound and budget-feasible plans.

For a segment S of ops (one pipeline stage, on device kind c) and a period T, the least
sensitivity that makes the stage's compute fit T is a multiple-choice knapsack:

    minsens(S, T) = min sum_v s[v,q_v]  s.t.  sum_v t[v,q_v,c] <= T.

Relative to each op's least-sensitive precision (base time t0, base sensitivity s0) an
option saves dt = t0 - t[v,q,c] > 0 seconds for ds = s[v,q] - s0 >= 0, so minsens(S, T) =
sum_S s0 + min{ sum ds : sum dt >= sum_S t0 - T }. It is read off the segment's exact
Pareto front of (saved seconds, added sensitivity) (``segment_fronts``; fronts are
built incrementally along nested downsets). Where a front would exceed ``max_front``
points the LP relaxation stands in for the bound (greedy on the convex-hull steps sorted
by ds/dt, the last step taken fractionally: a lower bound on minsens).

A plan with period <= T under budget B is a chain of <= K downsets (model.downsets) whose
segments each satisfy memory (at the smallest bytes), the boundary link loads at the
narrowest bytes <= T, and sum_segments minsens(S, T) <= B. Dropping casts, memory at
the chosen precision and shared links keeps this a relaxation, so

    R(T) = min over downset chains of sum_s minsens(S_s, T) > B   =>   period > T

and bisection on T (R is non-increasing) gives ``budget_bound``: the largest T proven
infeasible, a valid lower bound on every budget-feasible plan's period on the path. The
chain attaining R at the smallest feasible T, with each segment's minimising precisions,
is a plan (``budget_plans``), re-partitioned exactly for its precisions (casts included)
and scored with costs.evaluate.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from distplan.costs.evaluate import plan_cost, plan_sensitivity
from distplan.costs.problem import Problem
from distplan.core.errors import DistplanError
from distplan.core.plan import Plan
from distplan.model.downsets import fixed_precision_plan, segment_memory, sent_matrix, stage_factors, tied_matrix
from distplan.model.extract import make_plan
from distplan.costs.check import plan_violations


def budget_from_fraction(problem: Problem, fraction: float) -> float:
    """Sensitivity budget = fraction x S_max, S_max = sum_v max_q s[v,q] (every op at its
    most sensitive, i.e. lowest, precision); 0.1 means "10 %"."""
    if not (isinstance(fraction, (int, float)) and math.isfinite(fraction) and fraction >= 0):
        raise DistplanError(f"sensitivity budget fraction must be a number >= 0 (0.1 = 10 %), got {fraction!r}")
    return float(fraction) * float(problem.sensitivity.max(axis=1).sum())


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


def precision_steps(problem: Problem, c: int, cap_bytes: float = math.inf) -> Steps:
    """Lower convex hull of (time, sensitivity) per op on kind ``c``, as sorted steps."""
    V, Q = problem.n_ops, len(problem.precisions)
    base_t, base_s, base_q = np.zeros(V), np.zeros(V), np.zeros(V, dtype=np.int64)
    steps = []
    for v in range(V):
        pts = sorted((float(problem.sensitivity[v, q]), problem.op_time_s(v, q, c), q) for q in range(Q)
                     if _usable(problem, v, q, c, cap_bytes))
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


def _usable(problem: Problem, v: int, q: int, c: int, cap_bytes: float) -> bool:
    """Kind c runs precision q and op v alone fits ``cap_bytes`` at q (one microbatch)."""
    return bool(problem.supported[q, c]) and math.isfinite(problem.op_time_s(v, q, c)) and \
        problem.static_bytes[v, q] + problem.act_bytes[v, q] <= cap_bytes


def precision_options(problem: Problem, c: int, cap_bytes: float = math.inf
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
    """Per op on kind ``c`` (precisions where it alone fits ``cap_bytes``, as the MILP's
    cells): base time t0, base sensitivity s0 and base precision of its least-sensitive
    precision (ties: fastest), and its options [(dt, ds, q)] that save time (dt > 0),
    without the ones another option dominates (saves no less for less)."""
    V, Q = problem.n_ops, len(problem.precisions)
    t0, s0, q0 = np.full(V, math.inf), np.full(V, math.inf), np.zeros(V, dtype=np.int64)
    opts: list = []
    for v in range(V):
        pts = sorted((float(problem.sensitivity[v, q]), problem.op_time_s(v, q, c), q) for q in range(Q)
                     if _usable(problem, v, q, c, cap_bytes))
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


def _extend_front(saved: np.ndarray, sens: np.ndarray, options) -> tuple[np.ndarray, np.ndarray]:
    """Pareto front (saved ascending, sens ascending) after one more op with ``options``."""
    if not options:
        return saved, sens
    a = np.concatenate([saved] + [saved + dt for dt, _, _ in options])
    b = np.concatenate([sens] + [sens + ds for _, ds, _ in options])
    order = np.lexsort((-a, b))           # sensitivity ascending, then saved descending
    a, b = a[order], b[order]
    prev = np.concatenate([[-math.inf], np.maximum.accumulate(a)[:-1]])
    keep = a > prev
    return a[keep], b[keep]


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


@dataclass(frozen=True)
class _Tables:
    """Everything the chain DP needs that does not depend on T, for one path."""

    mat: np.ndarray            # (N, V) downsets
    sub: np.ndarray            # (N, N) j subset of i
    kinds: list[int]           # kind per stage
    base: dict                 # kind -> (t0, s0, q0, options) of precision_options
    W0: dict                   # kind -> (N,) base time of each downset
    S0: dict                   # kind -> (N,) base sensitivity of each downset
    fronts: dict               # kind -> {(i, j): (saved, sens)} for segments fast enough for T_max
    capped: dict               # kind -> set of (i, j) whose front exceeded max_front (LP stands in)
    steps: dict                # kind -> Steps (LP fallback)
    mem: dict                  # (kind, "lb"|"ub") -> (N, N) least added sensitivity to fit memory;
                               # kind -> (m0, options, cap) of the "ub" side
    link_need: list            # stage s -> (N,) boundary (s-1 -> s) load if stages < s hold downset j
    mem_ok: list               # stage s -> (N, N) memory fits for segment i - j
    joint_cache: dict = None   # (kind, side, i, j, T) -> joint_choice result; "deadline" -> s


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
                     if q != base_q[v] and problem.sensitivity[v, q] >= s0 and _usable(problem, v, q, c, cap_bytes))
        mine, best = [], m0[v]
        for ds, m, q in pts:
            if m < best:
                mine.append((m0[v] - m, ds, q))
                best = m
        opts.append(mine)
    return m0, opts


def _fronts(mat: np.ndarray, sub: np.ndarray, want: np.ndarray, opts: list, max_front: int):
    """Pareto fronts (saved, added sensitivity) of every segment i - j with want[i, j],
    each grown from the largest already-built segment i' - j with i' subset of i."""
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
                a, b = _extend_front(a, b, opts[int(v)])
                if len(a) > max_front:
                    break
            if len(a) > max_front:
                capped.add((i, j))
            else:
                fronts[(i, j)] = (a, b)
            done.append(i)
    return fronts, capped


def _tables(problem: Problem, path: tuple[int, ...], mat: np.ndarray, t_max_s: float,
            max_front: int = 4096) -> _Tables:
    from distplan.model.downsets import _subset_matrix
    N, V = mat.shape
    K = len(path)
    kinds = [int(problem.device_kind[d]) for d in path]
    fm = mat.astype(float)
    sub = _subset_matrix(mat)
    # memory: static + n x act per op + m x (sent bytes of the segment's ops read by a
    # later stage, a per-segment constant at the smallest bytes (bound side) or at the base
    # precision (plan side: options only shrink bytes))
    factors = stage_factors(problem, K, relax_1f1b=True)
    plan_factors = stage_factors(problem, K)
    base, W0, S0, fronts, capped, steps, mem = {}, {}, {}, {}, {}, {}, {}
    # tied copies at their fewest bytes on both sides (the plan side's reader often has to
    # drop below its base precision to hold one; plans are checked anyway)
    tied_held = tied_matrix(problem, mat, problem.tied_bytes.min(axis=1))
    sent_lb = sent_matrix(problem, mat, problem.send_bytes.min(axis=1))
    for c in set(kinds):
        stg = [s for s in range(K) if kinds[s] == c]
        cap = max(float(problem.device_mem_bytes[path[s]]) for s in stg)
        base[c] = t0, s0, q0, opts = precision_options(problem, c, cap)
        bt = np.where(np.isfinite(t0), t0, 1e300)
        W0[c] = fm @ bt
        S0[c] = fm @ np.where(np.isfinite(s0), s0, 1e300)
        best_saved = np.array([max((o[0] for o in opts[v]), default=0.0) for v in range(V)])
        Wfast = fm @ (bt - best_saved)
        want = sub & (Wfast[:, None] - Wfast[None, :] <= t_max_s * (1 + 1e-12))
        fronts[c], capped[c] = _fronts(mat, sub, want, opts, max_front)
        steps[c] = precision_steps(problem, c, cap) if capped[c] else None
        # memory: bound side (fewest in-flight, largest cap) and plan side (most, smallest)
        for side, n, m, cp in (
                ("lb", min(factors[s][0] for s in stg), min(factors[s][1] for s in stg), cap),
                ("ub", max(plan_factors[s][0] for s in stg), max(plan_factors[s][1] for s in stg),
                 min(float(problem.device_mem_bytes[path[s]]) for s in stg))):
            m0, mopts = memory_options(problem, c, cap, q0, n)
            held = tied_held
            if m > 0:
                sent = sent_lb if side == "lb" else sent_matrix(problem, mat, problem.send_bytes[np.arange(V), q0])
                held = held + m * sent
            need = fm @ m0
            need = need[:, None] - need[None, :] + held - cp * (1 + 1e-12)
            mf, mcap = _fronts(mat, sub, want, mopts, max_front)
            extra = np.zeros((N, N))
            for (i, j), (a, b) in mf.items():
                if need[i, j] <= 0:
                    continue
                r = int(np.searchsorted(a, need[i, j] * (1 - 1e-12)))
                extra[i, j] = b[r] if r < len(a) else math.inf
            for (i, j) in mcap:
                extra[i, j] = 0.0 if side == "lb" else math.inf
            mem[(c, side)] = extra
            mem[(c, side, "joint")] = (fm @ m0, cp, _joint_options(problem, c, cap, t0, q0, n), held)
            if side == "ub":
                mem[c] = (m0, mopts, cp, held)
    eb = problem.edge_elems * problem.bytes_per_elem.min()
    u, v = problem.edges[:, 0], problem.edges[:, 1]
    out_bytes = (mat[:, u] & ~mat[:, v]).astype(float) @ eb if len(u) else np.zeros(N)
    topo, bw = problem.topology, problem.link_bw_bytes_per_s
    mems = segment_memory(problem, mat, problem.static_bytes.min(axis=1), problem.act_bytes.min(axis=1),
                          problem.send_bytes.min(axis=1), factors, problem.tied_bytes.min(axis=1))
    link_need, mem_ok = [], []
    for s in range(K):
        if s == 0:
            link_need.append(np.zeros(N))
        else:
            r = list(topo.route(path[s - 1], path[s]))
            if problem.training:
                r += list(topo.route(path[s], path[s - 1]))
            link_need.append(out_bytes * max((1.0 / bw[l] for l in r), default=0.0))
        mem_ok.append(mems[s] <= problem.device_mem_bytes[path[s]] * (1 + 1e-12))
    return _Tables(mat, sub, kinds, base, W0, S0, fronts, capped, steps, mem, link_need, mem_ok, {})


def _joint_options(problem: Problem, c: int, cap_bytes: float, t0: np.ndarray, q0: np.ndarray,
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
                if q == b or not _usable(problem, v, q, c, cap_bytes):
                    continue
                dt = t0[v] - problem.op_time_s(v, q, c)
                dm = mb - (problem.static_bytes[v, q] + n_inflight * problem.act_bytes[v, q])
                if dt > 0 or dm > 0:
                    mine.append((float(dt), float(dm), float(problem.sensitivity[v, q] - problem.sensitivity[v, b]), q))
        out.append(mine)
    return out


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


def _lp_min_sensitivity(tb: _Tables, c: int, i: int, j: int, need_s: float) -> float:
    """LP relaxation of the segment knapsack: steps by slope, the last one fractionally."""
    st = tb.steps[c]
    m = tb.mat[i, st.op] & ~tb.mat[j, st.op]
    cs, cz = np.cumsum(st.dt * m), np.cumsum(st.ds * m)
    r = int(np.searchsorted(cs, need_s))
    if r >= len(cs):
        return math.inf
    return float(cz[r] - (cs[r] - need_s) * st.slope[r])


def _segment_table(tb: _Tables, c: int, T: float, side: str, joint: bool = False) -> np.ndarray:
    """(N, N) on kind c, inf where no precision choice fits T. side "lb": s0 +
    max(time knapsack, memory knapsack) <= minsens(i - j, T) with memory; side "ub":
    s0 + time + memory knapsack >= it (the union of both choices fits both)."""
    N = tb.mat.shape[0]
    out = np.full((N, N), math.inf)
    W0, S0 = tb.W0[c], tb.S0[c]
    for (i, j), (a, b) in tb.fronts[c].items():
        need = W0[i] - W0[j] - T
        if need <= 1e-12 * T:
            out[i, j] = S0[i] - S0[j]
            continue
        r = int(np.searchsorted(a, need * (1 - 1e-12)))
        if r < len(a):
            out[i, j] = S0[i] - S0[j] + b[r]
    for (i, j) in tb.capped[c]:
        need = W0[i] - W0[j] - T
        out[i, j] = S0[i] - S0[j] + (0.0 if need <= 0 else _lp_min_sensitivity(tb, c, i, j, need))
    m = tb.mem[(c, side)]
    if side == "lb":
        res = S0[:, None] - S0[None, :] + np.maximum(out - (S0[:, None] - S0[None, :]), m)
    else:
        res = out + m
    if joint:
        _joint_refine(tb, c, T, side, res)
    return res


class _JointTimeout(Exception):
    """The joint knapsack refinement ran past its time allowance."""


def _joint_bisect(tb: _Tables, budget: float, lo: float, hi: float, rel_tol: float,
                  time_s: float) -> tuple[float, float]:
    """(lo, hi) tightened by the joint knapsack (lb side, then ub side) within ``time_s``
    seconds; on time out whatever each side had proven stands (each bisection step is a
    proof on its own)."""
    tb.joint_cache.clear()
    tb.joint_cache["deadline"] = time.perf_counter() + time_s
    try:
        lo = _bisect(tb, budget, lo, hi, rel_tol, "lb", joint=True, keep=True)[0]
        hi = _bisect(tb, budget, lo, hi, rel_tol, "ub", joint=True, keep=True)[1]
    except _JointTimeout as e:
        if e.args:
            lo, hi = (e.args[0], hi) if e.args[2] == "lb" else (lo, e.args[1])
    finally:
        tb.joint_cache.clear()
        tb.joint_cache["deadline"] = -math.inf   # no joint work outside the allowance
    return lo, hi


def _joint_refine(tb: _Tables, c: int, T: float, side: str, res: np.ndarray) -> None:
    """Where a segment needs both time and memory savings, replace the table entry by the
    exact joint knapsack (joint_choice): no lower than side "lb"'s max, no higher than
    side "ub"'s sum, so "lb" takes the max and "ub" the min with what is there."""
    W0, S0 = tb.W0[c], tb.S0[c]
    Mn, cp, jopts, held = tb.mem[(c, side, "joint")]
    cache = tb.joint_cache
    deadline = cache.get("deadline", math.inf)
    for (i, j) in list(tb.fronts[c]) + list(tb.capped[c]):
        nt = W0[i] - W0[j] - T
        nm = Mn[i] - Mn[j] + held[i, j] - cp * (1 + 1e-12)
        if nt <= 1e-12 * T or nm <= 0 or not math.isfinite(res[i, j]):
            continue
        key = (c, side, i, j, T)
        if key not in cache:
            if time.perf_counter() > deadline:
                raise _JointTimeout()
            ops = [int(v) for v in np.nonzero(tb.mat[i] & ~tb.mat[j])[0]]
            cache[key] = joint_choice({v: jopts[v] for v in ops if jopts[v]}, nt, nm)
        r = cache[key]
        if r is None:
            continue
        val = S0[i] - S0[j] + r[0]
        res[i, j] = max(res[i, j], val) if side == "lb" else min(res[i, j], val)


def _chain_dp(tb: _Tables, T: float, side: str = "lb", joint: bool = False
              ) -> tuple[float, list[tuple[int, int, int]]]:
    """R(T) (side "lb"): min over downset chains (memory and boundary loads <= T) of the
    summed segment sensitivity at period T; side "ub" sums the plan-side tables.
    Returns (value, [(stage, i, j)] per stage)."""
    N = tb.mat.shape[0]
    K = len(tb.kinds)
    tabs = {c: _segment_table(tb, c, T, side, joint) for c in set(tb.kinds)}
    f = np.where(np.arange(N) == 0, 0.0, math.inf)
    choice = np.zeros((K, N), dtype=np.int64)
    tol = 1e-12 * T
    for s in range(K):
        base = np.where(tb.link_need[s] <= T + tol, f, math.inf)
        val = base[None, :] + np.where(tb.mem_ok[s], tabs[tb.kinds[s]], math.inf)
        j = np.argmin(val, axis=1)
        f = val[np.arange(N), j]
        choice[s] = j
    segs, i = [], N - 1
    for s in range(K - 1, -1, -1):
        j = int(choice[s, i])
        segs.append((s, i, j))
        i = j
    return float(f[N - 1]), segs[::-1]


def _bisect(tb: _Tables, budget: float, lo: float, hi: float, rel_tol: float,
            side: str = "lb", joint: bool = False, keep: bool = False,
            deadline: float = math.inf) -> tuple[float, float]:
    """(largest T found with R(T) > budget, smallest T found with R(T) <= budget); past
    ``deadline`` (perf_counter seconds) it stops with what it has proven."""
    slack = 1e-9 * max(1.0, abs(budget))
    while (hi - lo) > rel_tol * hi and time.perf_counter() < deadline:
        mid = 0.5 * (lo + hi)
        try:
            val = _chain_dp(tb, mid, side, joint)[0]
        except _JointTimeout:
            if keep:
                raise _JointTimeout(lo, hi, side) from None
            raise
        if val > budget + slack:
            lo = mid
        else:
            hi = mid
    return lo, hi


def budget_bound(problem: Problem, path: tuple[int, ...], mat: np.ndarray, budget: float,
                 lo_s: float, hi_s: float, rel_tol: float = 1e-5, joint_time_s: float = 3.0) -> float:
    """Largest period T in [lo_s, hi_s] with R(T) > budget (module docstring): no plan on
    ``path`` within the budget has a period <= the returned value. ``lo_s`` must itself be
    a valid lower bound (e.g. model.downsets.relaxation_bound), ``hi_s`` >= some
    budget-feasible plan's period."""
    if not hi_s > lo_s:
        return lo_s
    tb = _tables(problem, path, mat, hi_s)
    lo, hi = _bisect(tb, budget, lo_s, hi_s, rel_tol)
    return _joint_bisect(tb, budget, lo, hi_s, rel_tol, joint_time_s)[0]


def _plan_of(problem: Problem, path: tuple[int, ...], tb: _Tables, T: float, segs) -> Plan | None:
    """The chain's plan: each segment's ops on its stage at the precisions of the exact
    least-sensitivity choice that fits T, joined with the one that fits memory."""
    V = problem.n_ops
    stage, prec = [0] * V, [0] * V
    for s, i, j in segs:
        c = tb.kinds[s]
        t0, _, q0, opts = tb.base[c]
        ops = [int(v) for v in np.nonzero(tb.mat[i] & ~tb.mat[j])[0]]
        for v in ops:
            stage[v], prec[v] = s, int(q0[v])
        need = float(sum(t0[v] for v in ops)) - T
        Mn, cp, jopts, held = tb.mem[(c, "ub", "joint")]
        need_m = float(Mn[i] - Mn[j] + held[i, j]) - cp * (1 + 1e-12)
        if need > 1e-12 * T and need_m > 0:   # both: the exact joint choice
            r = joint_choice({v: jopts[v] for v in ops if jopts[v]}, need, need_m)
            if r is not None and r[1] is not None:
                for v, k in r[1].items():
                    prec[v] = int(jopts[v][k][3])
                continue
        if need > 0:
            ch = front_choice({v: opts[v] for v in ops if opts[v]}, need)
            if ch is None:
                return None
            for v, k in ch.items():
                prec[v] = int(opts[v][k][2])
        m0, mopts, cap, held = tb.mem[c]
        need = float(sum(m0[v] for v in ops) + held[i, j]) - cap
        if need > 0:
            ch = front_choice({v: mopts[v] for v in ops if mopts[v]}, need)
            if ch is None:
                return None
            for v, k in ch.items():   # the smaller of the two choices' bytes
                q = int(mopts[v][k][2])
                if problem.static_bytes[v, q] + problem.act_bytes[v, q] < \
                        problem.static_bytes[v, prec[v]] + problem.act_bytes[v, prec[v]]:
                    prec[v] = q
    return make_plan(problem, path, stage, prec)


def budget_plans_and_bound(problem: Problem, path: tuple[int, ...], mat: np.ndarray, budget: float,
                           lo_s: float, hi_s: float | None, rel_tol: float = 1e-5,
                           joint_time_s: float = 3.0, deadline: float = math.inf) -> tuple[list[Plan], float]:
    """(plans, bound): ``budget_bound`` (``hi_s`` None: searched upwards from ``lo_s``; the
    bound is then only ``lo_s`` if no T up to 1.5^8 lo_s fits) and the chain plans at the smallest feasible T found
    and a few larger T, each also re-partitioned exactly for its precisions
    (model.downsets.fixed_precision_plan, casts included). Only plans within the budget
    that pass sim.check are returned, best period first. Past ``deadline`` (perf_counter
    seconds) it returns what it has: the bound proven so far (at least ``lo_s``) and the
    plans found so far."""
    slack = 1e-9 * max(1.0, abs(budget))
    if hi_s is None:   # no plan known: grow T until the chain DP fits the budget
        hi_s = lo_s
        for _ in range(8):
            if time.perf_counter() > deadline:
                return [], lo_s
            hi_s *= 1.5
            tb = _tables(problem, path, mat, hi_s)
            if _chain_dp(tb, hi_s, "ub")[0] <= budget + slack:
                break
        else:   # no plan found: still prove what the bound side can (R_lb > budget up to T)
            if _chain_dp(tb, hi_s, "lb")[0] > budget + slack:
                return [], hi_s
            return [], _bisect(tb, budget, lo_s, hi_s, rel_tol, deadline=deadline)[0]
    if not hi_s > lo_s or time.perf_counter() > deadline:
        return [], lo_s
    tb = _tables(problem, path, mat, hi_s)
    if _chain_dp(tb, hi_s, "lb")[0] > budget + slack:   # nothing within the budget up to hi_s
        return [], hi_s
    lo, _ = _bisect(tb, budget, lo_s, hi_s, rel_tol, deadline=deadline)
    _, hi = _bisect(tb, budget, lo, hi_s, rel_tol, "ub", deadline=deadline)
    # tighten both sides with the joint time-and-memory knapsack between them
    joint_time_s = max(0.0, min(joint_time_s, deadline - time.perf_counter()))
    lo, hi = _joint_bisect(tb, budget, lo, hi, rel_tol, joint_time_s)
    tb.joint_cache["deadline"] = time.perf_counter() + joint_time_s   # for the plans below
    out = {}
    for T in (hi, hi * 1.001, hi * 1.003, hi * 1.01):
        try:
            val, segs = _chain_dp(tb, min(T, hi_s), "ub", joint=True)
        except _JointTimeout:
            val, segs = _chain_dp(tb, min(T, hi_s), "ub")
        if val > budget + slack:
            continue
        p = _plan_of(problem, path, tb, min(T, hi_s), segs)
        if p is None:
            continue
        prec = [problem.q_index(x) for x in p.op_precision]
        cands = [p]
        stage = fixed_precision_plan(problem, path, mat, prec)
        if stage is not None:
            cands.append(make_plan(problem, path, stage, prec))
        for c in cands:
            if plan_sensitivity(problem, c) <= budget + slack and not plan_violations(problem, c):
                out[(c.op_stage, c.op_precision)] = c
    return sorted(out.values(), key=lambda p: plan_cost(problem, p).period_s), lo
