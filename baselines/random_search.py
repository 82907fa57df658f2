"""Random search over valid partitions.

Each sample: a device path family, a stage count K (1..min(devices, ops)), K-1 random
cut points along the topological order (a contiguous, hence acyclic, partition), the
stages placed on the path's first K devices, and random precisions among those each
stage's device supports — per operator or, half of the time, one per stage. Samples
that break memory (or the sensitivity budget) are rejected by the feasibility gate
before scoring; the best scored plan is kept.
"""
from __future__ import annotations

import numpy as np

from baselines.result import BaselineResult, Tracker
from baselines.scoring import Scorer
from baselines.space import allowed_precisions, build_plan, contiguous_stages, device_paths
from costs.problem import Problem
from distplan.plan import Plan


def sample_plan(problem: Problem, rng: np.random.Generator,
                paths: list[tuple[str, tuple[int, ...]]]) -> Plan:
    """One random contiguous partition with random precisions (not yet checked)."""
    path = paths[int(rng.integers(len(paths)))][1]
    V, D = problem.n_ops, len(path)
    k = int(rng.integers(1, min(D, V) + 1))
    cuts = sorted(int(c) for c in rng.choice(np.arange(1, V), size=k - 1, replace=False)) if k > 1 else []
    op_stage = contiguous_stages(cuts, V)
    allowed = [allowed_precisions(problem, path[s]) for s in range(k)]
    if rng.random() < 0.5:
        per_stage = [a[int(rng.integers(len(a)))] for a in allowed]
        prec = tuple(per_stage[s] for s in op_stage)
    else:
        prec = tuple(allowed[s][int(rng.integers(len(allowed[s])))] for s in op_stage)
    return build_plan(problem, op_stage, prec, path)


def search(problem: Problem, budget_s: float, seed: int = 0, scorer: Scorer | None = None,
           sensitivity_budget: float | None = None, max_candidates: int | None = None) -> BaselineResult:
    """Sample valid partitions until the budget ends; return the best feasible one."""
    rng = np.random.default_rng(seed)
    tr = Tracker(problem, "random", budget_s, scorer, sensitivity_budget, max_candidates)
    paths = device_paths(problem)
    while not tr.expired():
        tr.evaluate(sample_plan(problem, rng, paths))
    return tr.result()
