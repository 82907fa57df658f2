"""PipeDream-style dynamic-programming pipeline partitioner, then a precision pass.

For every device path family, precision policy (the fastest precision of each op on
each device kind, or one uniform precision) and stage count K, a DP over the
topological order finds the contiguous partition into K non-empty stages on
``path[0..K-1]`` that minimises the largest stage time, where a stage's time is the
compute (plus consumer-side casts) of its ops on its device, and the boundary after
stage k costs the bytes of every tensor crossing it over the bottleneck bandwidth of
the route ``path[k] -> path[k+1]``; stages that overflow their device's memory are
excluded. (PipeDream, Narayanan et al. 2019, solves the same recurrence with
replication; here stages have one device each.) Partitions are then scored in order
of their DP value until the budget ends. With a sensitivity budget, the precision pass
raises the fidelity of ops greedily (largest sensitivity saved per second added on the
least loaded stages first) until the plan fits the budget. No cut splits a colocate group.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from distplan.baselines.result import BaselineResult, Tracker
from distplan.core.clock import Clock
from distplan.baselines.scoring import Scorer
from distplan.baselines.space import build_plan, contiguous_stages, device_paths
from distplan.costs.memory import activation_factors, contiguous_sent_bytes, contiguous_tied_bytes
from distplan.costs.problem import Problem
from distplan.workloads.colocate import blocked_cuts


@dataclass(frozen=True)
class Partition:
    """A DP result: estimated period, cut points, stage count, path, precision policy."""

    period_s: float
    cuts: tuple[int, ...]
    path: tuple[int, ...]
    policy: str
    precision: tuple[tuple[str, ...], ...]  # per kind index: op precisions under the policy


def _policy_precisions(problem: Problem, policy: str) -> list[list[int] | None]:
    """Per kind c: the precision index of every op (None if the kind cannot run the policy)."""
    out: list[list[int] | None] = []
    for c in range(len(problem.kind_names)):
        ok = [q for q in range(len(problem.precisions)) if problem.supported[q, c]]
        if not ok:
            out.append(None)
        elif policy == "fastest":
            out.append([min(ok, key=lambda q: (problem.op_time_s(v, q, c), q)) for v in range(problem.n_ops)])
        else:
            q = problem.precisions.index(policy)
            per_op = [problem.fallback_q(v, q, c) for v in range(problem.n_ops)]   # int8 on matrix products
            out.append(per_op if q in ok and None not in per_op else None)
    return out


def _prefix(values: Sequence[float]) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(values)])


def partitions(problem: Problem, policies: Sequence[str] | None = None) -> list[Partition]:
    """Best contiguous partition for every path family, precision policy and stage count."""
    V = problem.n_ops
    policies = list(policies or ("fastest", *problem.precisions))
    edges = [(int(u), int(v), e) for e, (u, v) in enumerate(problem.edges)]
    out: list[Partition] = []
    for policy in policies:
        qs = _policy_precisions(problem, policy)
        tables = {}
        for c, q in enumerate(qs):
            if q is None:
                continue
            t = [problem.op_time_s(v, q[v], c) for v in range(V)]
            for u, v, e in edges:
                t[v] += problem.cast_time_s(e, q[u], q[v], c)
            cross = np.zeros(V + 1)  # bytes over the cut before op i: edges u < i <= v
            for u, v, e in edges:
                cross[u + 1] += problem.edge_elems[e] * problem.bytes_per_elem[q[u]]
                cross[v + 1] -= problem.edge_elems[e] * problem.bytes_per_elem[q[u]]
            tables[c] = (_prefix(t), _prefix([problem.static_bytes[v, q[v]] for v in range(V)]),
                         _prefix([problem.act_bytes[v, q[v]] for v in range(V)]), np.cumsum(cross),
                         contiguous_sent_bytes(problem.sending_edges(), problem.send_bytes[np.arange(V), np.asarray(q)]),
                         contiguous_tied_bytes(problem.tied_owner, problem.tied_bytes[np.arange(V), np.asarray(q)]))
        for _, path in device_paths(problem):
            kinds = [int(problem.device_kind[d]) for d in path]
            if any(c not in tables for c in kinds):
                continue
            for K in range(1, min(len(path), V) + 1):
                part = _dp(problem, path, kinds, tables, K)
                if part is not None:
                    period, cuts = part
                    prec = tuple(tuple(problem.precisions[q] for q in qs[c]) if qs[c] else () for c in range(len(qs)))
                    out.append(Partition(period, cuts, tuple(path), policy, prec))
    out.sort(key=lambda p: (p.period_s, len(p.cuts)))
    return out


def _dp(problem: Problem, path, kinds, tables, K: int) -> tuple[float, tuple[int, ...]] | None:
    """Min over contiguous K-partitions of the largest stage or boundary time (vectorised
    over (i, j): stage m holds ops i..j-1)."""
    V = problem.n_ops
    i_idx = np.arange(V + 1)[:, None]
    j_idx = np.arange(V + 1)[None, :]
    cut_ok = ~np.array(blocked_cuts(problem.graph), dtype=bool)   # no cut inside a colocate group
    free = cut_ok[:, None] & cut_ok[None, :]

    def seg(m: int) -> np.ndarray:
        P, S, Act, _, sent, tied = tables[kinds[m]]
        n_all, n_sent = activation_factors(problem.schedule, m, K, problem.microbatches)
        mem = S[None, :] - S[:, None] + n_all * (Act[None, :] - Act[:, None]) + n_sent * sent + tied
        ok = (mem <= problem.device_mem_bytes[path[m]] * (1 + 1e-12)) & (i_idx < j_idx) & free
        return np.where(ok, P[None, :] - P[:, None], np.inf)

    A = np.full((K, V + 1), np.inf)
    arg = np.zeros((K, V + 1), dtype=np.int64)
    A[0] = seg(0)[0]
    for m in range(1, K):
        bw = problem.topology.route_bw_bytes_per_s(path[m - 1], path[m])
        comm = tables[kinds[m - 1]][3] / bw
        M = np.maximum(np.maximum(A[m - 1], comm)[:, None], seg(m))
        M[:m] = np.inf  # the first m stages need at least m ops
        arg[m] = np.argmin(M, axis=0)
        A[m] = M[arg[m], np.arange(V + 1)]
    if not np.isfinite(A[K - 1, V]):
        return None
    cuts, j = [], V
    for m in range(K - 1, 0, -1):
        j = int(arg[m, j])
        cuts.append(j)
    return float(A[K - 1, V]), tuple(reversed(cuts))


def precision_pass(problem: Problem, op_stage: Sequence[int], op_precision: Sequence[str],
                   path: Sequence[int], sensitivity_budget: float | None) -> tuple[str, ...] | None:
    """Raise op precisions greedily until the summed sensitivity fits the budget
    (None when even the highest fidelity everywhere does not fit)."""
    prec = list(op_precision)
    if sensitivity_budget is None:
        return tuple(prec)
    qv = [problem.q_index(p) for p in prec]
    kinds = [int(problem.device_kind[path[s]]) for s in op_stage]
    sens = float(sum(problem.sensitivity[v, qv[v]] for v in range(len(qv))))
    load = np.zeros(max(op_stage) + 1)
    for v, s in enumerate(op_stage):
        load[s] += problem.op_time_s(v, qv[v], kinds[v])
    while sens > sensitivity_budget * (1 + 1e-9) + 1e-12:
        best = None
        period = load.max()
        for v, s in enumerate(op_stage):
            c = kinds[v]
            for q in range(qv[v]):  # higher fidelity comes first in problem.precisions
                if not problem.supported[q, c] or not problem.op_allowed[v, q]:
                    continue
                ds = problem.sensitivity[v, qv[v]] - problem.sensitivity[v, q]
                if ds <= 0:
                    continue
                dt = problem.op_time_s(v, q, c) - problem.op_time_s(v, qv[v], c)
                new_period = max(period, load[s] + dt)
                key = (new_period, -ds / max(dt, 1e-15))
                if best is None or key < best[0]:
                    best = (key, v, q, ds, dt)
        if best is None:
            return None
        _, v, q, ds, dt = best
        load[op_stage[v]] += dt
        sens -= ds
        qv[v] = q
        prec[v] = problem.precisions[q]
    return tuple(prec)


def search(problem: Problem, budget_s: float, seed: int = 0, scorer: Scorer | None = None,
           sensitivity_budget: float | None = None, max_candidates: int | None = None,
           clock: Clock | None = None) -> BaselineResult:
    """Score the DP partitions best-estimate first until the budget ends (``seed`` unused:
    the DP is deterministic)."""
    tr = Tracker(problem, "dp", budget_s, scorer, sensitivity_budget, max_candidates, clock)
    for part in partitions(problem):
        if tr.expired():
            break
        op_stage = contiguous_stages(part.cuts, problem.n_ops)
        prec = tuple(part.precision[int(problem.device_kind[part.path[s]])][v] for v, s in enumerate(op_stage))
        prec2 = precision_pass(problem, op_stage, prec, part.path, sensitivity_budget)
        if prec2 is None:
            tr.idle()
            continue
        tr.evaluate(build_plan(problem, op_stage, prec2, part.path))
    return tr.result()
