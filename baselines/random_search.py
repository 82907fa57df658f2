"""Random search over valid partitions.

Each sample: a device path family; a random contiguous (hence acyclic) partition of the
topological order into K stages on the path's first K devices, drawn so that every
stage fits its device's memory at the ops' smallest precisions (K uniform over the
feasible counts, then each stage's end uniform over the ends that fit and leave a
remainder that can still be packed); random precisions among those each stage's device
supports — per operator or, half of the time, one per stage; then a repair that lowers
precisions on any device still over its memory. Valid solutions are sparse when memory
is tight, so sampling partitions uniformly and rejecting would rarely find one. Samples
that still break a constraint (or the sensitivity budget) are rejected by the
feasibility gate before scoring; the best scored plan is kept. No cut falls inside a
colocate group's span of the topological order.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from distplan.baselines.result import BaselineResult, Tracker
from distplan.core.clock import Clock
from distplan.baselines.scoring import Scorer
from distplan.baselines.space import allowed_precisions, build_plan, contiguous_stages, device_paths
from distplan.costs.evaluate import plan_memory_bytes
from distplan.costs.memory import inflight_microbatches
from distplan.costs.problem import Problem
from distplan.core.plan import Plan
from distplan.workloads.colocate import blocked_cuts


def _footprints(problem: Problem, path: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, float]:
    """Per op: the smallest resident bytes over the precisions the path's devices run (with
    the largest in-flight count any stage may have), which precision gives it, and the
    smallest device capacity on the path (conservative bounds for packing)."""
    n_in = inflight_microbatches(problem.schedule, 0, len(path), problem.microbatches)
    qs = sorted({q for d in path for q, p in enumerate(problem.precisions) if p in allowed_precisions(problem, d)})
    mem = np.where(problem.op_allowed[:, qs], problem.static_bytes[:, qs] + n_in * problem.act_bytes[:, qs], np.inf)
    return mem.min(axis=1), np.array(qs)[mem.argmin(axis=1)], float(min(problem.device_mem_bytes[list(path)]))


def _random_cuts(problem: Problem, rng: np.random.Generator, path: tuple[int, ...]) -> list[int] | None:
    """Cut points of a random contiguous partition whose stages fit their devices at the
    ops' smallest precisions: a stage count K uniform over the feasible ones, then each
    stage's end uniform over the ends that fit and leave a packable remainder."""
    V, D = problem.n_ops, len(path)
    foot, _, cap = _footprints(problem, path)
    pre = np.concatenate([[0.0], np.cumsum(foot)])
    fit_end = np.searchsorted(pre, pre + cap * (1 + 1e-12), side="right") - 1  # largest e: sum foot[j:e] <= cap
    need = np.zeros(V + 1)
    for j in range(V - 1, -1, -1):
        need[j] = 1 + need[fit_end[j]] if fit_end[j] > j else np.inf
    if need[0] > min(D, V):
        return None
    K = int(rng.integers(int(need[0]), min(D, V) + 1))
    blocked = blocked_cuts(problem.graph)   # a cut inside a colocate group is never drawn
    cuts, start = [], 0
    for k in range(K - 1):
        r = K - k - 1  # stages after this one
        ends = [e for e in range(start + 1, int(fit_end[start]) + 1)
                if need[e] <= r and V - e >= r and not blocked[e]]
        if not ends:
            return None
        start = ends[int(rng.integers(len(ends)))]
        cuts.append(start)
    return cuts if pre[V] - pre[start] <= cap * (1 + 1e-12) else None


def _repair_memory(problem: Problem, plan: Plan) -> Plan:
    """Lower precisions on over-full devices (largest saving first) until they fit."""
    mem = plan_memory_bytes(problem, plan)
    over = [k for k, s in enumerate(plan.stages) if any(mem[d] > problem.device_mem_bytes[d] for d in s.devices)]
    if not over:
        return plan
    prec = list(plan.op_precision)
    for k in over:
        d = plan.stages[k].devices[0]
        n_in = inflight_microbatches(plan.schedule, k, plan.n_stages, plan.microbatches)
        ops = plan.ops_in_stage(k)

        def foot(v: int, q: int) -> float:
            return problem.static_bytes[v, q] + n_in * problem.act_bytes[v, q]

        used = sum(foot(v, problem.q_index(prec[v])) for v in ops)
        best = {v: min((problem.q_index(p) for p in allowed_precisions(problem, d, v)), key=lambda q: foot(v, q),
                       default=problem.q_index(prec[v])) for v in ops}
        for v in sorted(ops, key=lambda v: foot(v, best[v]) - foot(v, problem.q_index(prec[v]))):
            if used <= problem.device_mem_bytes[d]:
                break
            used += foot(v, best[v]) - foot(v, problem.q_index(prec[v]))
            prec[v] = problem.precisions[best[v]]
    return dataclasses.replace(plan, op_precision=tuple(prec))


def sample_plan(problem: Problem, rng: np.random.Generator,
                paths: list[tuple[str, tuple[int, ...]]]) -> Plan:
    """One random valid partition with random precisions (memory repaired; the caller
    still checks it)."""
    V = problem.n_ops
    path = paths[int(rng.integers(len(paths)))][1]
    cuts = _random_cuts(problem, rng, path)
    if cuts is None:  # no packing at the smallest precisions: a plain random partition
        blocked = blocked_cuts(problem.graph)
        free = np.array([c for c in range(1, V) if not blocked[c]], dtype=np.int64)
        k = int(rng.integers(1, min(len(path), len(free) + 1) + 1))
        cuts = sorted(int(c) for c in rng.choice(free, size=k - 1, replace=False)) if k > 1 else []
    k = len(cuts) + 1
    op_stage = contiguous_stages(cuts, V)
    allowed = [allowed_precisions(problem, path[s]) for s in range(k)]
    if rng.random() < 0.5:
        per_stage = [a[int(rng.integers(len(a)))] for a in allowed]
        prec = tuple(per_stage[s] for s in op_stage)
    else:
        prec = tuple(allowed[s][int(rng.integers(len(allowed[s])))] for s in op_stage)
    prec = problem.effective_precisions(prec)   # int8 only where the op may use it
    return _repair_memory(problem, build_plan(problem, op_stage, prec, path))


def search(problem: Problem, budget_s: float, seed: int = 0, scorer: Scorer | None = None,
           sensitivity_budget: float | None = None, max_candidates: int | None = None,
           clock: Clock | None = None) -> BaselineResult:
    """Sample valid partitions until the budget ends; return the best feasible one."""
    rng = np.random.default_rng(seed)
    tr = Tracker(problem, "random", budget_s, scorer, sensitivity_budget, max_candidates, clock)
    paths = device_paths(problem)
    while not tr.expired():
        tr.evaluate(sample_plan(problem, rng, paths))
    return tr.result()
