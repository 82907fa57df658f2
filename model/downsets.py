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
Graphs with more than ``max_downsets`` downsets are skipped (returns None). Exposed
communication adds each segment's transfers (model.exposed_dp).
"""
from __future__ import annotations

import math

import numpy as np

from distplan.model.sent_sums import sent_matrix
from distplan.costs.collectives import bottleneck_s_per_byte, boundary_links
from distplan.costs.memory import activation_factors
from distplan.costs.problem import Problem
from distplan.workloads.colocate import units


def enumerate_downsets(problem: Problem, max_downsets: int = 3000) -> np.ndarray | None:
    """Boolean matrix (N, V) of all downsets, sorted by size; None if more than the cap.
    With colocate groups, only the downsets that hold each group whole: unions of
    ``workloads.colocate.units``, grown one unit at a time."""
    V = problem.n_ops
    preds = [0] * V
    for u, v in problem.edges:
        preds[int(v)] |= 1 << int(u)
    groups = units(problem.graph)
    masks = [sum(1 << v for v in grp) for grp in groups]
    needs = [0] * len(groups)   # what a unit's members read from outside it
    for i, grp in enumerate(groups):
        for v in grp:
            needs[i] |= preds[v]
        needs[i] &= ~masks[i]
    seen = {0}
    frontier = [0]
    while frontier:
        nxt = []
        for s in frontier:
            for i, grp in enumerate(groups):
                if not (s >> grp[0]) & 1 and (needs[i] & s) == needs[i]:
                    t = s | masks[i]
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


def tied_matrix(problem: Problem, mat: np.ndarray, tied: np.ndarray) -> np.ndarray:
    """(N, N): entry [i, j] sums ``tied[v]`` over the ops v of segment i - j whose tied
    weights' owner is not in the segment (they hold their own copy)."""
    N = mat.shape[0]
    out = np.zeros((N, N))
    for v, o in enumerate(problem.tied_owner):
        if o >= 0 and tied[v] > 0:
            a, b = mat[:, v].astype(float), mat[:, o].astype(float)
            out += tied[v] * (a[:, None] - a[None, :]) * (1.0 - b[:, None] + b[None, :])
    return out


def segment_max(mat: np.ndarray, values: np.ndarray, block: int = 256) -> np.ndarray:
    """(N, N): entry [i, j] is the largest ``values[v]`` over the ops v in downset i and not
    in downset j (0 when there is none). Ops are ranked by value and each downset packed
    into 64-bit words in rank order, so the answer is the lowest set bit of ``i & ~j``."""
    N, V = mat.shape
    order = np.argsort(-np.asarray(values, dtype=float), kind="stable")
    ranked = np.asarray(values, dtype=float)[order]
    bits = mat[:, order]
    words = (V + 63) // 64
    packed = np.zeros((N, words), dtype=np.uint64)
    for w in range(words):
        chunk = bits[:, w * 64:(w + 1) * 64].astype(np.uint64)
        packed[:, w] = (chunk << np.arange(chunk.shape[1], dtype=np.uint64)).sum(axis=1, dtype=np.uint64)
    out = np.zeros((N, N))
    for a in range(0, N, block):
        done = np.zeros((min(block, N - a), N), dtype=bool)
        for w in range(words):
            x = packed[a:a + block, None, w] & ~packed[None, :, w]
            new = (x != 0) & ~done
            if new.any():
                low = x[new] & (~x[new] + np.uint64(1))   # the lowest set bit: the op of highest value
                out[a:a + block][new] = ranked[np.log2(low.astype(np.float64)).astype(np.int64) + 64 * w]
                done |= new
    return out


def segment_memory(problem: Problem, mat: np.ndarray, mem_static: np.ndarray, mem_act: np.ndarray,
                   mem_send: np.ndarray, factors: list[tuple[float, float]],
                   mem_tied: np.ndarray | None = None) -> list[np.ndarray]:
    """Per stage s, (N, N) bytes of segment i - j (downset i minus downset j) on stage s:
    static + n_all x act + n_sent x sent bytes of the segment's ops with a consumer
    outside downset i (costs.memory.activation_factors; ``factors[s]`` = (n_all, n_sent)),
    plus ``mem_tied`` of ops whose tied weights' owner is outside the segment. A stage of
    an inference stream relaxed to n_all = 0 (``stage_factors``) holds the segment's
    largest ``mem_act`` instead (``segment_max``: its liveness peak is never below)."""
    fm = mat.astype(float)
    MS, MA = fm @ mem_static, fm @ mem_act
    base_ = (MS[:, None] - MS[None, :], MA[:, None] - MA[None, :])
    if mem_tied is not None and (problem.tied_owner >= 0).any():
        base_ = (base_[0] + tied_matrix(problem, mat, mem_tied), base_[1])
    peak = segment_max(mat, mem_act) if problem.schedule == "stream" and any(a == 0 for a, _ in factors) else 0.0
    sent = sent_matrix(problem, mat, mem_send) if any(b > 0 for _, b in factors) else None
    memo: dict[tuple[float, float], np.ndarray] = {}   # stages with equal factors share one array
    for a, b in factors:
        if (a, b) not in memo:
            memo[a, b] = base_[0] + (a * base_[1] if a else peak) + (b * sent if sent is not None and b > 0 else 0.0)
    return [memo[f] for f in factors]


def stage_factors(problem: Problem, K: int, relax_1f1b: bool = False) -> list[tuple[float, float]]:
    """activation_factors of each of K stages; when relaxing, the fewest copies any plan
    holds: 1F1B's one microbatch, and none of the activations of an inference stream
    (it holds its liveness peak, costs.memory: at least the largest output, which
    ``segment_memory`` adds for n_all = 0) but the older copies of the sent bytes. As
    they stand (not relaxed) they overcount a stream: every output once is the sum the
    liveness peak never exceeds, a valid bound for plans."""
    if relax_1f1b and problem.schedule == "1f1b":
        return [(1.0, 0.0)] * K
    if relax_1f1b and problem.schedule == "stream":
        return [(0.0, float(activation_factors("stream", s, K, problem.microbatches)[1])) for s in range(K)]
    return [tuple(float(x) for x in activation_factors(problem.schedule, s, K, problem.microbatches))
            for s in range(K)]


def partition_dp(problem: Problem, path: tuple[int, ...], mat: np.ndarray, op_cost: np.ndarray,
                 edge_bytes: np.ndarray, mem_static: np.ndarray, mem_act: np.ndarray,
                 mem_send: np.ndarray, factors: list[tuple[float, float]],
                 mem_tied: np.ndarray | None = None, comm: np.ndarray | None = None
                 ) -> tuple[float, list[int]] | None:
    """Min over downset chains of the max stage/boundary load.

    ``op_cost[v, c]`` seconds of op v on kind c (incl. casts it performs), ``edge_bytes[e]``
    bytes tensor e puts on a boundary, ``mem_*[v]`` bytes, ``factors[s]`` the activation
    copies stage s holds (``segment_memory``; an inference stream's stage also the bytes that cross into
    it, as costs.memory counts). Boundary load = bytes x max over its links
    of 1/bw (exact when no two boundaries share a link, a lower bound otherwise).
    ``comm`` (N, N): exposed send and receive seconds of each segment
    (model.exposed_dp.comm_matrix), added to its load; with it no boundary load is
    charged (exposed transfers go direct: each link carries at most what its ends send).
    Returns (value, op -> stage).
    """
    N, V = mat.shape
    K = len(path)
    kinds = [int(problem.device_kind[d]) for d in path]
    fm = mat.astype(float)
    fin = {c: np.isfinite(op_cost[:, c]) for c in set(kinds)}
    W = {c: fm @ np.where(fin[c], op_cost[:, c], 0.0) for c in set(kinds)}
    BAD = {c: fm @ (~fin[c]).astype(float) for c in set(kinds)}   # ops kind c cannot run
    mems = segment_memory(problem, mat, mem_static, mem_act, mem_send, factors, mem_tied)
    u, v = problem.edges[:, 0], problem.edges[:, 1]
    out_bytes = (mat[:, u] & ~mat[:, v]).astype(float) @ edge_bytes if len(u) else np.zeros(N)
    stream = problem.schedule == "stream"
    sub = _subset_matrix(mat)
    full = N - 1
    f = np.where(np.arange(N) == 0, 0.0, math.inf)   # before stage 0: only the empty set
    choice = np.zeros((K, N), dtype=np.int64)
    for s in range(K):
        c = kinds[s]
        cap = problem.device_mem_bytes[path[s]]
        if s == 0 or comm is not None:
            base = f
        else:
            inv = bottleneck_s_per_byte(problem, boundary_links(problem, path[s - 1], path[s]))
            base = np.maximum(f, out_bytes * inv)
        seg = np.where(BAD[c][:, None] - BAD[c][None, :] > 0.5, math.inf, W[c][:, None] - W[c][None, :])
        if comm is not None:
            seg = seg + comm
        val = np.maximum(base[None, :], seg)
        mem = mems[s] + out_bytes[None, :] if stream and s else mems[s]   # + what crosses into the stage
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


def _forced_casts_s(problem: Problem, q: int, c: int) -> np.ndarray:
    """(V,) per op v computed at q on kind c: the least cast time of its inputs over the
    precisions their producers may use (zero when a producer may already be at q)."""
    out = np.zeros(problem.n_ops)
    Q = len(problem.precisions)
    for e, (u, v) in enumerate(problem.edges.tolist()):
        if problem.op_allowed[u, q] and problem.supported[q, c]:
            continue
        out[v] += min((problem.cast_time_s(e, a, q, c) for a in range(Q) if problem.op_allowed[u, a]), default=0.0)
    return out


def relaxation_bound(problem: Problem, path: tuple[int, ...], mat: np.ndarray) -> float:
    """Lower bound on the MILP period: cheapest precision per op and kind with the casts
    into it that no producer precision avoids (charged on the consumer's stage, as the
    MILP does), narrowest bytes, memory at its smallest (one in-flight microbatch for 1F1B)."""
    V, Q, C = problem.n_ops, len(problem.precisions), len(problem.kind_names)
    cost = np.full((V, C), math.inf)
    for c in range(C):
        for q in range(Q):
            if problem.supported[q, c]:
                cost[:, c] = np.minimum(cost[:, c], problem.fwd_time_s[:, q, c] + problem.bwd_time_s[:, q, c]
                                        + _forced_casts_s(problem, q, c))
    ok = problem.op_allowed   # only the precisions each op may use (the low-bit policy)

    def least(x: np.ndarray) -> np.ndarray:
        return np.where(ok, x, math.inf).min(axis=1)

    narrow = least(np.broadcast_to(problem.bytes_per_elem, ok.shape))
    eb = problem.edge_elems * (narrow[problem.edges[:, 0]] if len(problem.edges) else 0.0)
    r = partition_dp(problem, path, mat, cost, eb, least(problem.static_bytes),
                     least(problem.act_bytes), least(problem.send_bytes),
                     stage_factors(problem, len(path), relax_1f1b=True), least(problem.tied_bytes),
                     exposed_comm(problem, path, mat, least(problem.send_bytes)))
    return math.inf if r is None else r[0]


def exposed_comm(problem: Problem, path: tuple[int, ...], mat: np.ndarray, send: np.ndarray) -> np.ndarray | None:
    """Under ``comm`` "exposed", each segment's send and receive seconds at ``send``
    bytes per op (model.exposed_dp); None otherwise."""
    if not problem.exposed:
        return None
    from distplan.model.exposed_dp import comm_matrix, op_comm_s   # it reads sent_matrix from here
    return comm_matrix(problem, mat, op_comm_s(problem, path, send))


def fixed_precision_plan(problem: Problem, path: tuple[int, ...], mat: np.ndarray,
                         prec: list[int]) -> list[int] | None:
    """Best stage assignment for a fixed precision per op (casts charged to consumers)."""
    V, C = problem.n_ops, len(problem.kind_names)
    cost = np.array([[problem.op_time_s(v, prec[v], c) for c in range(C)] for v in range(V)])
    for e, (u, v) in enumerate(problem.edges):
        for c in range(C):
            cost[v, c] += problem.cast_time_s(e, prec[u], prec[v], c)
    eb = np.array([problem.edge_elems[e] * problem.bytes_per_elem[prec[u]] for e, (u, _) in enumerate(problem.edges)])
    pick = (np.arange(V), np.asarray(prec))
    # an op the kind cannot run costs inf (nan_to_num alone would make it the largest float, whose
    # sums overflow to inf and nan in the DP)
    cost = np.nan_to_num(cost, nan=math.inf, posinf=math.inf)
    r = partition_dp(problem, path, mat, cost, eb, problem.static_bytes[pick],
                     problem.act_bytes[pick], problem.send_bytes[pick], stage_factors(problem, len(path)),
                     problem.tied_bytes[pick], exposed_comm(problem, path, mat, problem.send_bytes[pick]))
    return None if r is None else r[1]
