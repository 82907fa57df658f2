"""Fast warm start: dynamic programming over the topological order.

For a fixed precision per op, the ops are cut into at most K contiguous segments of
the topological order, segment k on ``path[k]`` (empty segments are relays). The bytes
on a cut depend only on its position (every tensor u -> v with u < cut <= v crosses
it), so the DP over (stage, cut position) is exact for this restricted plan space when
no two boundaries share a link; every candidate is re-scored with costs.evaluate. An
inference stream's segment holds what the checker charges it (its liveness peak, the
older sent copies and the bytes crossing into it, costs.memory).
Several precision assignments are tried: each uniform precision, fastest per op, and a
greedy fill of the sensitivity budget. No cut falls inside a colocate group's span.
Exposed communication adds each segment's transfers to its load (model.exposed_dp; a
relaxation, every plan re-scored exactly).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from distplan.costs.collectives import (bottleneck_s_per_byte, boundary_links,
                                        store_forward_coefficients)
from distplan.costs.evaluate import plan_cost, plan_latency_s, plan_sensitivity
from distplan.costs.memory import (activation_factors, contiguous_sent_bytes, contiguous_stream_bytes,
                                   contiguous_tied_bytes)
from distplan.costs.problem import Problem
from distplan.core.plan import Plan
from distplan.model.extract import make_plan
from distplan.costs.check import plan_violations
from distplan.model.exposed_dp import comm_matrix, op_comm_s
from distplan.workloads.colocate import blocked_cuts


#: the most ops whose (ops x ops) exposed-transfer table the DP builds; beyond, it cuts
#: for compute and the checker's memory alone (its plans are re-scored exactly anyway)
EXPOSED_MAX_OPS = 4000


def _dp(problem: Problem, path: tuple[int, ...], prec: list[int], latency: bool,
        expired: Callable[[], bool] | None = None, cut: list[str] | None = None) -> list[int] | None:
    V, K = problem.n_ops, len(path)
    kinds = [int(problem.device_kind[d]) for d in path]
    inf = math.inf
    # per-kind op cost (compute + incoming casts), prefix sums
    cost_c: dict[int, np.ndarray] = {}
    for c in set(kinds):
        a = np.array([problem.op_time_s(v, prec[v], c) for v in range(V)])
        for e, (u, v) in enumerate(problem.edges):
            a[v] += problem.cast_time_s(e, prec[u], prec[v], c)
        bad = ~np.isfinite(a)   # ops kind c cannot run: counted, so empty segments cost 0
        cost_c[c] = (np.concatenate([[0.0], np.cumsum(np.where(bad, 0.0, a))]),
                     np.concatenate([[0], np.cumsum(bad)]))
    stat = np.concatenate([[0.0], np.cumsum([problem.static_bytes[v, prec[v]] for v in range(V)])])
    act = np.concatenate([[0.0], np.cumsum([problem.act_bytes[v, prec[v]] for v in range(V)])])
    pick = (np.arange(V), np.asarray(prec, dtype=np.int64))
    sent = contiguous_sent_bytes(problem.edges, problem.send_bytes[pick])
    live = None
    if problem.schedule == "stream":   # the checker's liveness rule, exact for a contiguous run
        live = contiguous_stream_bytes(problem.edges, problem.act_bytes[pick], problem.send_bytes[pick],
                                       problem.microbatches)
    tied = contiguous_tied_bytes(problem.tied_owner, problem.tied_bytes[pick])
    diff = np.zeros(V + 2)
    for e, (u, v) in enumerate(problem.edges):
        nb = problem.edge_elems[e] * problem.bytes_per_elem[prec[u]]
        diff[u + 1] += nb
        diff[v + 1] -= nb
    cut_bytes = np.cumsum(diff)[: V + 1]             # bytes crossing a cut before position i
    comm = None
    if problem.exposed and not latency and V <= EXPOSED_MAX_OPS:   # segment [i, j)'s transfers (model.exposed_dp)
        prefix = np.tri(V + 1, V, -1, dtype=bool)      # row n: the first n ops, a downset
        comm = comm_matrix(problem, prefix, op_comm_s(problem, path, problem.send_bytes[pick])).T
    f = np.full(V + 1, inf)
    choice = np.zeros((K, V + 1), dtype=np.int64)
    # Per stage, every (segment start i, end j) at once: seg[i, j] is the segment's time, inf
    # where i > j, where the segment holds an op the kind cannot run or outgrows the device's
    # memory. It depends on the stage only through (kind, memory, activation factors), so
    # it is built once per such key (the same sums as a loop over j, in the same order;
    # argmin picks the same first minimum).
    seg_by: dict[tuple, np.ndarray] = {}
    lower = np.tril(np.ones((V + 1, V + 1), dtype=bool), -1)   # i > j: no segment
    blocked = np.array(blocked_cuts(problem.graph), dtype=bool)

    def seg_matrix(c: int, cap: float, n_all: int, n_sent: int) -> np.ndarray:
        key = (c, float(cap), n_all, n_sent) if live is None else (c, float(cap))
        m = seg_by.get(key)
        if m is None:
            P, NB = cost_c[c]
            seg = np.where(NB[None, :] - NB[:, None] > 0, inf, P[None, :] - P[:, None])
            if comm is not None:
                seg = seg + comm
            if live is not None:   # and one microbatch of what crosses into the stage
                mem = live + cut_bytes[:, None]
            else:
                mem = n_all * (act[None, :] - act[:, None])
                if n_sent:
                    mem = mem + n_sent * sent
            mem = mem + (stat[None, :] - stat[:, None]) + tied
            m = np.where((mem <= cap) & ~lower, seg, inf)
            if blocked.any():   # a cut inside a colocate group's span (workloads.colocate)
                m[blocked, :] = inf
                m[:, blocked] = inf
            if len(seg_by) >= 8:   # 1f1b/gpipe: a new key per stage; keep memory bounded
                seg_by.clear()
            seg_by[key] = m
        return m

    cols = np.arange(V + 1)
    done = K
    for s in range(K):
        if s and expired is not None and expired():
            done = s   # keep what the first s stages reach: the rest stay empty (relays at the end)
            break
        c = kinds[s]
        n_all, n_sent = activation_factors(problem.schedule, s, K, problem.microbatches)
        cap = problem.device_mem_bytes[path[s]]
        if s == 0:
            link = np.zeros(V + 1)
            prev = np.where(cols == 0, 0.0, inf)
        else:
            r = boundary_links(problem, path[s - 1], path[s])
            if latency:
                lat_s, s_per_byte = store_forward_coefficients(problem, r)
                link = cut_bytes * s_per_byte + np.where(cut_bytes > 0, lat_s, 0.0)
            elif comm is not None:   # direct sends: on the segments' loads, not on the boundary
                link = np.zeros(V + 1)
            else:
                link = cut_bytes * bottleneck_s_per_byte(problem, r)
            prev = f
        base = prev + link if latency else np.maximum(prev, link)
        m = seg_matrix(c, cap, n_all, n_sent)
        val = (base[:, None] + m) if latency else np.maximum(base[:, None], m)
        b = np.argmin(val, axis=0)
        choice[s] = b
        f = val[b, cols]
    if done < K and cut is not None:
        cut.append(f"heuristic DP: {done} of {K} pipeline stages considered")
    if not math.isfinite(f[V]):
        return None
    stage = [0] * V
    j = V
    for s in range(done - 1, -1, -1):
        i = int(choice[s, j])
        for v in range(i, j):
            stage[v] = s
        j = i
    return stage


def precision_candidates(problem: Problem, path: tuple[int, ...], budget: float | None) -> list[list[int]]:
    V, Q = problem.n_ops, len(problem.precisions)
    kinds = sorted({int(problem.device_kind[d]) for d in path})
    ok = [q for q in range(Q) if all(problem.supported[q, c] for c in kinds)] or \
         [q for q in range(Q) if any(problem.supported[q, c] for c in kinds)]
    c0 = kinds[0]
    t = np.array([[problem.op_time_s(v, q, c0) if q in ok else math.inf for q in range(Q)] for v in range(V)])
    cands = [[problem.fallback_q(v, q) for v in range(V)] for q in ok]   # int8 where the op may use it
    fast = [int(np.argmin(t[v])) for v in range(V)]
    cands.append(fast)
    if budget is not None:
        top = [problem.fallback_q(v, min(ok)) for v in range(V)]
        cur = list(top)
        spent = sum(problem.sensitivity[v, top[v]] for v in range(V))
        moves = []
        for v in range(V):
            for q in ok:
                gain = t[v, top[v]] - t[v, q]
                ds = problem.sensitivity[v, q] - problem.sensitivity[v, top[v]]
                if gain > 0 and math.isfinite(gain):
                    moves.append((-(gain / ds) if ds > 0 else -math.inf, v, q, ds))
        moves.sort()
        for _, v, q, ds in moves:
            if cur[v] == top[v] and spent + ds <= budget:
                cur[v], spent = q, spent + ds
        cands.append(cur)
    out, seen = [], set()
    for c in cands:
        if tuple(c) not in seen:
            seen.add(tuple(c))
            out.append(c)
    return out


def score(problem: Problem, plan: Plan, objective: str, weight: float) -> float:
    main = plan_cost(problem, plan).period_s if objective == "throughput" else plan_latency_s(problem, plan)
    return main + weight * plan_sensitivity(problem, plan)


def heuristic_plan(problem: Problem, path: tuple[int, ...], objective: str = "throughput",
                   budget: float | None = None, weight: float = 0.0,
                   expired: Callable[[], bool] | None = None,
                   cut: list[str] | None = None) -> tuple[Plan, float] | None:
    """Best DP plan over the precision candidates, with its exact score; None if none fits.
    ``expired`` (the clock, core.clock.Clock.expired): checked between candidates and
    inside the DP, which then keeps the best plan over the stages it reached; what was
    left undone is appended to ``cut`` (one line each)."""
    best = None
    cands = precision_candidates(problem, path, budget)
    for n, prec in enumerate(cands):
        if n and expired is not None and expired():
            if cut is not None:
                cut.append(f"heuristic: {len(cands) - n} of {len(cands)} precision candidates not tried")
            break
        if budget is not None and math.fsum(problem.sensitivity[v, q] for v, q in enumerate(prec)) > budget:
            continue
        stage = _dp(problem, path, prec, objective == "latency", expired, cut)
        if stage is None:
            continue
        plan = make_plan(problem, path, stage, prec)
        if plan_violations(problem, plan):
            continue
        s = score(problem, plan, objective, weight)
        if best is None or s < best[1]:
            best = (plan, s)
    return best


def neighbours(problem: Problem, plan: Plan, path: tuple[int, ...], lanes=None, checked: bool = True,
               expired: Callable[[], bool] | None = None) -> list[Plan]:
    """Feasible plans one move away: one op shifted to the next or previous stage, or
    run at another precision (candidate starts for the K best plans). ``checked=False``:
    every such move, feasible or not (the caller checks what it uses). ``expired``: the
    clock, checked per op (on a100x1024's 1,024-lane plans each move costs ~50 ms): the
    moves of the ops reached so far once it says so."""
    K, Q = len(path), len(problem.precisions)
    preds, succs = problem.graph.preds(), problem.graph.succs()
    stage, qs = list(plan.op_stage), [problem.q_index(p) for p in plan.op_precision]
    out = []
    for v in range(problem.n_ops):
        if expired is not None and expired():
            break
        for d in (-1, 1):
            k = stage[v] + d
            if 0 <= k < K and all(stage[u] <= k for u in preds[v]) and all(stage[w] >= k for w in succs[v]):
                st = stage[:]
                st[v] = k
                out.append(make_plan(problem, path, st, qs, lanes=lanes))
        for q in range(Q):
            if q != qs[v]:
                qq = qs[:]
                qq[v] = q
                out.append(make_plan(problem, path, stage, qq, lanes=lanes))
    return [p for p in out if not plan_violations(problem, p)] if checked else out
