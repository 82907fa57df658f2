"""Segment tables: per segment i - j of two nested downsets (one pipeline stage on device
kind c) and a period T, the least sensitivity that makes the stage fit T (and memory).

``build_tables`` computes everything that does not depend on T once per path (fronts of
the time and memory knapsacks, model.knapsack; link loads and memory fits per stage);
``segment_table`` reads them at one T. Side "lb" is a lower bound on the true least
sensitivity (time and memory knapsacks apart, the larger), side "ub" the sensitivity of
a choice that fits both (their sum, the union of both choices). ``joint=True`` refines
either side with the exact joint knapsack within the time allowance of ``JointCache``.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from distplan.costs.collectives import bottleneck_s_per_byte, boundary_links
from distplan.costs.problem import Problem
from distplan.model.downsets import _subset_matrix, segment_memory, sent_matrix, stage_factors, tied_matrix
from distplan.model.knapsack import Steps, joint_choice, lp_min_sensitivity, segment_fronts
from distplan.model.savings import joint_options, memory_options, precision_options, precision_steps

SIDES = ("lb", "ub")


@dataclass(frozen=True)
class MemorySide:
    """One side's memory data on one device kind ("lb": fewest in-flight copies, largest
    capacity, smallest bytes; "ub": most copies, smallest capacity, base bytes)."""

    extra: np.ndarray        # (N, N) least added sensitivity for segment i - j to fit memory
    base_bytes: np.ndarray   # (N,) bytes of each downset at its ops' base precisions
    op_bytes: np.ndarray     # (V,) bytes of each op at its base precision
    options: list            # per op [(dm, ds, q)] (model.savings.memory_options)
    joint_options: list      # per op [(dt, dm, ds, q)] (model.savings.joint_options)
    cap_bytes: float
    held: np.ndarray         # (N, N) per-segment constant bytes (tied copies, sent bytes)


@dataclass(frozen=True)
class KindTables:
    """The T-independent tables of one device kind."""

    t0: np.ndarray           # (V,) base time (model.savings.precision_options)
    s0: np.ndarray           # (V,) base sensitivity
    q0: np.ndarray           # (V,) base precision
    options: list            # per op [(dt, ds, q)]
    W0: np.ndarray           # (N,) base time of each downset
    S0: np.ndarray           # (N,) base sensitivity of each downset
    fronts: dict             # (i, j) -> (saved, sens) for segments fast enough for T_max
    capped: set              # (i, j) whose front exceeded max_front (the LP stands in)
    steps: Steps | None      # convex-hull steps (LP fallback), when some segment is capped
    lb: MemorySide
    ub: MemorySide

    def side(self, name: str) -> MemorySide:
        return self.lb if name == "lb" else self.ub


@dataclass
class JointCache:
    """joint_choice results per (kind, side, i, j, T), and the perf_counter deadline for
    computing new ones (past it ``segment_table`` raises JointTimeout)."""

    deadline: float = math.inf
    entries: dict = field(default_factory=dict)

    def reset(self, deadline: float) -> None:
        self.entries.clear()
        self.deadline = deadline


@dataclass(frozen=True)
class SegmentTables:
    """Everything the chain DP (model.chain_dp) needs that does not depend on T, for one path."""

    mat: np.ndarray          # (N, V) downsets
    sub: np.ndarray          # (N, N) j subset of i
    kinds: list[int]         # device kind per stage
    by_kind: dict            # kind -> KindTables
    link_need: list          # stage s -> (N,) boundary (s-1 -> s) load if stages < s hold downset j
    mem_ok: list             # stage s -> (N, N) memory fits for segment i - j
    joint: JointCache


class JointTimeout(Exception):
    """The joint knapsack refinement ran past its time allowance. ``proven``: the
    (lo, hi, side) a bisection had proven when it stopped, if it says."""

    def __init__(self, proven: tuple[float, float, str] | None = None):
        super().__init__(proven)
        self.proven = proven


def _memory_side(problem: Problem, mat: np.ndarray, sub: np.ndarray, want: np.ndarray, c: int, cap: float,
                 q0: np.ndarray, t0: np.ndarray, side: str, n: float, m: float, cp: float,
                 held: np.ndarray, sent: np.ndarray | None, max_front: int) -> MemorySide:
    """Memory knapsack of one side: ``n`` in-flight copies of each output, ``m`` of the
    sent bytes, capacity ``cp``."""
    N = mat.shape[0]
    fm = mat.astype(float)
    m0, mopts = memory_options(problem, c, cap, q0, n)
    if m > 0:
        held = held + m * sent
    need = fm @ m0
    need = need[:, None] - need[None, :] + held - cp * (1 + 1e-12)
    mf, mcap = segment_fronts(mat, sub, want, mopts, max_front)
    extra = np.zeros((N, N))
    for (i, j), (a, b) in mf.items():
        if need[i, j] <= 0:
            continue
        r = int(np.searchsorted(a, need[i, j] * (1 - 1e-12)))
        extra[i, j] = b[r] if r < len(a) else math.inf
    for (i, j) in mcap:
        extra[i, j] = 0.0 if side == "lb" else math.inf
    return MemorySide(extra, fm @ m0, m0, mopts, joint_options(problem, c, cap, t0, q0, n), cp, held)


def build_tables(problem: Problem, path: tuple[int, ...], mat: np.ndarray, t_max_s: float,
                 max_front: int = 4096) -> SegmentTables:
    """The tables of ``path`` for periods up to ``t_max_s`` (segments slower than that
    even at their fastest precisions get no front)."""
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
    # tied copies at their fewest bytes on both sides (the plan side's reader often has to
    # drop below its base precision to hold one; plans are checked anyway)
    tied_held = tied_matrix(problem, mat, problem.tied_bytes.min(axis=1))
    sent_lb = sent_matrix(problem, mat, problem.send_bytes.min(axis=1))
    by_kind = {}
    for c in set(kinds):
        stg = [s for s in range(K) if kinds[s] == c]
        cap = max(float(problem.device_mem_bytes[path[s]]) for s in stg)
        t0, s0, q0, opts = precision_options(problem, c, cap)
        bt = np.where(np.isfinite(t0), t0, 1e300)
        best_saved = np.array([max((o[0] for o in opts[v]), default=0.0) for v in range(V)])
        Wfast = fm @ (bt - best_saved)
        want = sub & (Wfast[:, None] - Wfast[None, :] <= t_max_s * (1 + 1e-12))
        fronts, capped = segment_fronts(mat, sub, want, opts, max_front)
        m_ub = max(plan_factors[s][1] for s in stg)
        lb = _memory_side(problem, mat, sub, want, c, cap, q0, t0, "lb", min(factors[s][0] for s in stg),
                          min(factors[s][1] for s in stg), cap, tied_held, sent_lb, max_front)
        ub = _memory_side(problem, mat, sub, want, c, cap, q0, t0, "ub", max(plan_factors[s][0] for s in stg),
                          m_ub, min(float(problem.device_mem_bytes[path[s]]) for s in stg), tied_held,
                          sent_matrix(problem, mat, problem.send_bytes[np.arange(V), q0]) if m_ub > 0 else None,
                          max_front)
        by_kind[c] = KindTables(t0, s0, q0, opts, fm @ bt, fm @ np.where(np.isfinite(s0), s0, 1e300),
                                fronts, capped, precision_steps(problem, c, cap) if capped else None, lb, ub)
    eb = problem.edge_elems * problem.bytes_per_elem.min()
    u, v = problem.edges[:, 0], problem.edges[:, 1]
    out_bytes = (mat[:, u] & ~mat[:, v]).astype(float) @ eb if len(u) else np.zeros(N)
    mems = segment_memory(problem, mat, problem.static_bytes.min(axis=1), problem.act_bytes.min(axis=1),
                          problem.send_bytes.min(axis=1), factors, problem.tied_bytes.min(axis=1))
    link_need, mem_ok = [], []
    for s in range(K):
        if s == 0 or problem.exposed:   # exposed transfers go direct, never relayed (costs.exposed)
            link_need.append(np.zeros(N))
        else:
            link_need.append(out_bytes * bottleneck_s_per_byte(problem, boundary_links(problem, path[s - 1], path[s])))
        mem_ok.append(mems[s] <= problem.device_mem_bytes[path[s]] * (1 + 1e-12))
    return SegmentTables(mat, sub, kinds, by_kind, link_need, mem_ok, JointCache())


def segment_table(tb: SegmentTables, c: int, T: float, side: str, joint: bool = False) -> np.ndarray:
    """(N, N) on kind c, inf where no precision choice fits T. side "lb": s0 +
    max(time knapsack, memory knapsack) <= minsens(i - j, T) with memory; side "ub":
    s0 + time + memory knapsack >= it (the union of both choices fits both)."""
    N = tb.mat.shape[0]
    kt = tb.by_kind[c]
    out = np.full((N, N), math.inf)
    W0, S0 = kt.W0, kt.S0
    for (i, j), (a, b) in kt.fronts.items():
        need = W0[i] - W0[j] - T
        if need <= 1e-12 * T:
            out[i, j] = S0[i] - S0[j]
            continue
        r = int(np.searchsorted(a, need * (1 - 1e-12)))
        if r < len(a):
            out[i, j] = S0[i] - S0[j] + b[r]
    for (i, j) in kt.capped:
        need = W0[i] - W0[j] - T
        if need <= 0:
            out[i, j] = S0[i] - S0[j]
        else:
            st = kt.steps
            out[i, j] = S0[i] - S0[j] + lp_min_sensitivity(st, tb.mat[i, st.op] & ~tb.mat[j, st.op], need)
    m = kt.side(side).extra
    if side == "lb":
        res = S0[:, None] - S0[None, :] + np.maximum(out - (S0[:, None] - S0[None, :]), m)
    else:
        res = out + m
    if joint:
        _joint_refine(tb, c, T, side, res)
    return res


def _joint_refine(tb: SegmentTables, c: int, T: float, side: str, res: np.ndarray) -> None:
    """Where a segment needs both time and memory savings, replace the table entry by the
    exact joint knapsack (joint_choice): no lower than side "lb"'s max, no higher than
    side "ub"'s sum, so "lb" takes the max and "ub" the min with what is there."""
    kt = tb.by_kind[c]
    W0, S0 = kt.W0, kt.S0
    ms = kt.side(side)
    cache = tb.joint
    for (i, j) in list(kt.fronts) + list(kt.capped):
        nt = W0[i] - W0[j] - T
        nm = ms.base_bytes[i] - ms.base_bytes[j] + ms.held[i, j] - ms.cap_bytes * (1 + 1e-12)
        if nt <= 1e-12 * T or nm <= 0 or not math.isfinite(res[i, j]):
            continue
        key = (c, side, i, j, T)
        if key not in cache.entries:
            if time.perf_counter() > cache.deadline:
                raise JointTimeout()
            ops = [int(v) for v in np.nonzero(tb.mat[i] & ~tb.mat[j])[0]]
            cache.entries[key] = joint_choice({v: ms.joint_options[v] for v in ops if ms.joint_options[v]}, nt, nm)
        r = cache.entries[key]
        if r is None:
            continue
        val = S0[i] - S0[j] + r[0]
        res[i, j] = max(res[i, j], val) if side == "lb" else min(res[i, j], val)
