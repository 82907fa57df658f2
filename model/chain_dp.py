"""The chain DP over downsets under a sensitivity budget, and the plan of a chain.

R(T) = min over chains of <= K downsets (memory and boundary loads <= T) of the summed
segment sensitivity at period T (model.segments' tables): side "lb" sums lower bounds
(R(T) > budget proves no plan of period <= T fits the budget), side "ub" sums the
sensitivities of choices that fit (R(T) <= budget: ``chain_plan`` builds one).
"""
from __future__ import annotations

import math

import numpy as np

from distplan.costs.problem import Problem
from distplan.core.plan import Plan
from distplan.model.extract import make_plan
from distplan.model.knapsack import front_choice, joint_choice
from distplan.model.segments import SegmentTables, segment_table


def chain_dp(tb: SegmentTables, T: float, side: str = "lb", joint: bool = False
             ) -> tuple[float, list[tuple[int, int, int]]]:
    """R(T) on ``side`` and its chain, [(stage, i, j)] per stage (segment i - j)."""
    N = tb.mat.shape[0]
    K = len(tb.kinds)
    tabs = {c: segment_table(tb, c, T, side, joint) for c in set(tb.kinds)}
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


def chain_plan(problem: Problem, path: tuple[int, ...], tb: SegmentTables, T: float, segs) -> Plan | None:
    """The chain's plan: each segment's ops on its stage at the precisions of the exact
    least-sensitivity choice that fits T, joined with the one that fits memory."""
    V = problem.n_ops
    stage, prec = [0] * V, [0] * V
    for s, i, j in segs:
        kt = tb.by_kind[tb.kinds[s]]
        ms = kt.ub
        ops = [int(v) for v in np.nonzero(tb.mat[i] & ~tb.mat[j])[0]]
        for v in ops:
            stage[v], prec[v] = s, int(kt.q0[v])
        need = float(sum(kt.t0[v] for v in ops)) - T
        need_m = float(ms.base_bytes[i] - ms.base_bytes[j] + ms.held[i, j]) - ms.cap_bytes * (1 + 1e-12)
        if need > 1e-12 * T and need_m > 0:   # both: the exact joint choice
            jopts = ms.joint_options
            r = joint_choice({v: jopts[v] for v in ops if jopts[v]}, need, need_m)
            if r is not None and r[1] is not None:
                for v, k in r[1].items():
                    prec[v] = int(jopts[v][k][3])
                continue
        if need > 0:
            ch = front_choice({v: kt.options[v] for v in ops if kt.options[v]}, need)
            if ch is None:
                return None
            for v, k in ch.items():
                prec[v] = int(kt.options[v][k][2])
        need = float(sum(ms.op_bytes[v] for v in ops) + ms.held[i, j]) - ms.cap_bytes
        if need > 0:
            ch = front_choice({v: ms.options[v] for v in ops if ms.options[v]}, need)
            if ch is None:
                return None
            for v, k in ch.items():   # the smaller of the two choices' bytes
                q = int(ms.options[v][k][2])
                if problem.static_bytes[v, q] + problem.act_bytes[v, q] < \
                        problem.static_bytes[v, prec[v]] + problem.act_bytes[v, prec[v]]:
                    prec[v] = q
    return make_plan(problem, path, stage, prec)
