"""Exact min-max pipeline partition by dynamic programming over the DAG's downsets.

A monotone stage assignment is a chain of downsets I_0 <= I_1 <= ... <= I_{K-1} = all
ops (I_k = ops at stage <= k). With per-op additive stage costs this DP is exact:

    f[s][I] = min over downsets J <= I of max(f[s-1][J], cut_s(J), load_s(I - J))

where cut_s(J) is the link load of boundary s-1 -> s (tensors leaving J). Used twice:
- with each op's cheapest cost over precisions, no casts and the narrowest bytes, it
  is a relaxation of the MILP: its value is a valid lower bound on the period (added to
  the model as the cut ``T >= bound``);
- with a fixed precision per op it gives the best plan for that precision vector (a
  warm start).
Graphs with more than ``max_downsets`` downsets are skipped (returns None).
"""
from __future__ import annotations

import math

import numpy as np

from costs.memory import inflight_microbatches
from costs.problem import Problem


def enumerate_downsets(problem: Problem, max_downsets: int = 3000) -> np.ndarray | None:
    """Boolean matrix (N, V) of all downsets, sorted by size; None if more than the cap."""
    V = problem.n_ops
    preds = [0] * V
    for u, v in problem.edges:
        preds[int(v)] |= 1 << int(u)
    seen = {0}
    frontier = [0]
    while frontier:
        nxt = []
        for s in frontier:
            for v in range(V):
                if not (s >> v) & 1 and (preds[v] & s) == preds[v]:
                    t = s | (1 << v)
                    if t not in seen:
                        seen.add(t)
                        nxt.append(t)
                        if len(seen) > max_downsets:
                            return None
        frontier = nxt
    sets = sorted(seen, key=lambda s: (s.bit_count(), s))
    mat = np.zeros((len(sets), V), dtype=bool)
    for i, s in enumerate(sets):
        for v in range(V):
            if (s >> v) & 1:
                mat[i, v] = True
    return mat


def _subset_matrix(mat: np.ndarray) -> np.ndarray:
    """sub[i, j] = downset j is a subset of downset i."""
    N, V = mat.shape
    words = (V + 63) // 64
    packed = np.zeros((N, words), dtype=np.uint64)
    for w in range(words):
        chunk = mat[:, w * 64:(w + 1) * 64]
        weights = (np.uint64(1) << np.arange(chunk.shape[1], dtype=np.uint64))
        packed[:, w] = (chunk.astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64)
    sub = np.ones((N, N), dtype=bool)
    for w in range(words):
        sub &= (packed[None, :, w] & ~packed[:, None, w]) == 0
    return sub


def partition_dp(problem: Problem, path: tuple[int, ...], mat: np.ndarray, op_cost: np.ndarray,
                 edge_bytes: np.ndarray, mem_static: np.ndarray, mem_act: np.ndarray,
                 inflight: list[float]) -> tuple[float, list[int]] | None:
    """Min over downset chains of the max stage/boundary load.

    ``op_cost[v, c]`` seconds of op v on kind c (incl. casts it performs), ``edge_bytes[e]``
    bytes tensor e puts on a boundary, ``mem_*[v]`` bytes, ``inflight[s]`` microbatches
    held by stage s. Boundary load = bytes x max over its links of 1/bw (exact when no two
    boundaries share a link, a lower bound otherwise). Returns (value, op -> stage).
    """
    N, V = mat.shape
    K = len(path)
    kinds = [int(problem.device_kind[d]) for d in path]
    fm = mat.astype(float)
    fin = {c: np.isfinite(op_cost[:, c]) for c in set(kinds)}
    W = {c: fm @ np.where(fin[c], op_cost[:, c], 0.0) for c in set(kinds)}
    BAD = {c: fm @ (~fin[c]).astype(float) for c in set(kinds)}   # ops kind c cannot run
    MS, MA = fm @ mem_static, fm @ mem_act
    u, v = problem.edges[:, 0], problem.edges[:, 1]
    out_bytes = (mat[:, u] & ~mat[:, v]).astype(float) @ edge_bytes if len(u) else np.zeros(N)
    topo, bw = problem.topology, problem.link_bw_bytes_per_s
    sub = _subset_matrix(mat)
    full = N - 1
    f = np.where(np.arange(N) == 0, 0.0, math.inf)   # before stage 0: only the empty set
    choice = np.zeros((K, N), dtype=np.int64)
    for s in range(K):
        c = kinds[s]
        cap = problem.device_mem_bytes[path[s]]
        if s == 0:
            base = f
        else:
            r = list(topo.route(path[s - 1], path[s]))
            if problem.training:
                r += list(topo.route(path[s], path[s - 1]))
            inv = max((1.0 / bw[l] for l in r), default=0.0)
            base = np.maximum(f, out_bytes * inv)
        seg = np.where(BAD[c][:, None] - BAD[c][None, :] > 0.5, math.inf, W[c][:, None] - W[c][None, :])
        mem = (MS[:, None] - MS[None, :]) + inflight[s] * (MA[:, None] - MA[None, :])
        val = np.maximum(base[None, :], seg)
        val[~sub | (mem > cap * (1 + 1e-12))] = math.inf
        j = np.argmin(val, axis=1)
        f = val[np.arange(N), j]
        choice[s] = j
    if not math.isfinite(f[full]):
        return None
    stage = [0] * V
    i = full
    for s in range(K - 1, -1, -1):
        j = int(choice[s, i])
        for op in np.nonzero(mat[i] & ~mat[j])[0]:
            stage[int(op)] = s
        i = j
    return float(f[full]), stage


def relaxation_bound(problem: Problem, path: tuple[int, ...], mat: np.ndarray) -> float:
    """Lower bound on the MILP period: cheapest precision per op and kind, no casts,
    narrowest bytes, memory at its smallest (one in-flight microbatch for 1F1B)."""
    V, Q, C = problem.n_ops, len(problem.precisions), len(problem.kind_names)
    cost = np.full((V, C), math.inf)
    for c in range(C):
        for q in range(Q):
            if problem.supported[q, c]:
                cost[:, c] = np.minimum(cost[:, c], problem.fwd_time_s[:, q, c] + problem.bwd_time_s[:, q, c])
    eb = problem.edge_elems * problem.bytes_per_elem.min()
    K = len(path)
    inflight = [1.0 if problem.schedule == "1f1b" else
                float(inflight_microbatches(problem.schedule, s, K, problem.microbatches)) for s in range(K)]
    r = partition_dp(problem, path, mat, cost, eb, problem.static_bytes.min(axis=1),
                     problem.act_bytes.min(axis=1), inflight)
    return math.inf if r is None else r[0]


def fixed_precision_plan(problem: Problem, path: tuple[int, ...], mat: np.ndarray,
                         prec: list[int]) -> list[int] | None:
    """Best stage assignment for a fixed precision per op (casts charged to consumers)."""
    V, C = problem.n_ops, len(problem.kind_names)
    cost = np.array([[problem.op_time_s(v, prec[v], c) for c in range(C)] for v in range(V)])
    for e, (u, v) in enumerate(problem.edges):
        for c in range(C):
            cost[v, c] += problem.cast_time_s(e, prec[u], prec[v], c)
    eb = np.array([problem.edge_elems[e] * problem.bytes_per_elem[prec[u]] for e, (u, _) in enumerate(problem.edges)])
    K = len(path)
    inflight = [float(inflight_microbatches(problem.schedule, s, K, problem.microbatches)) for s in range(K)]
    r = partition_dp(problem, path, mat, np.nan_to_num(cost, nan=math.inf), eb,
                     np.array([problem.static_bytes[v, prec[v]] for v in range(V)]),
                     np.array([problem.act_bytes[v, prec[v]] for v in range(V)]), inflight)
    return None if r is None else r[1]
