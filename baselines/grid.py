"""Grid search over data x tensor x pipeline degrees and microbatch counts, the way
DistIR (Santhanam et al. 2021) explores strategies.

A grid point (dp, tp, pp, microbatches, precision) with dp * tp * pp <= devices, each
degree a divisor of the device count: the topological order is split into ``pp``
stages of (nearly) equal operator counts — uniform layer splits — and stage k takes
the next ``dp * tp`` devices along a device path family, as ``dp`` replicas of ``tp``
tensor-parallel devices (``distplan.core.plan.Stage``); every op runs at one precision
(each allowed precision in turn, or each op's fastest). Points are visited in a
seeded random order (so a budget that ends early still samples the whole grid
evenly); infeasible points are rejected by the feasibility gate; the best scored one
is returned. Tensor parallelism needs a scorer that models it (the simulator does; the
analytic period does not and such points are skipped).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from distplan.baselines.result import BaselineResult, Tracker
from distplan.baselines.scoring import Scorer
from distplan.baselines.space import allowed_precisions, device_paths, fastest_precision
from distplan.costs.problem import Problem
from distplan.core.plan import Plan, Stage


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def default_microbatch_counts(problem: Problem) -> tuple[int, ...]:
    m = problem.microbatches
    return tuple(sorted({max(1, m // 2), m, 2 * m}))


def grid_points(problem: Problem, microbatch_counts: Sequence[int] | None = None):
    """Every (dp, tp, pp, microbatches, precision policy, path index) of the grid."""
    D, V = len(device_paths(problem)[0][1]), problem.n_ops
    mbs = tuple(microbatch_counts or default_microbatch_counts(problem))
    policies = ("fastest", *problem.precisions)
    n_paths = len(device_paths(problem))
    degs = divisors(D)
    out = []
    for pp in degs:
        if pp > V:
            continue
        for tp in degs:
            for dp in degs:
                if dp * tp * pp > D:
                    continue
                for m in mbs:
                    for pol in policies:
                        for pi in range(n_paths):
                            out.append((dp, tp, pp, m, pol, pi))
    return out


def grid_plan(problem: Problem, dp: int, tp: int, pp: int, microbatches: int, policy: str,
              path: Sequence[int]) -> Plan | None:
    """The plan of one grid point (None if a stage's devices cannot run the policy)."""
    V, g = problem.n_ops, dp * tp
    op_stage = tuple(min(pp - 1, (v * pp) // V) for v in range(V))
    stages = tuple(Stage(tuple(int(d) for d in path[k * g:(k + 1) * g]), tensor_parallel=tp) for k in range(pp))
    prec = []
    for v, k in enumerate(op_stage):
        devs = stages[k].devices
        if policy == "fastest":
            p = fastest_precision(problem, v, devs[0])
        else:
            p = policy
        if any(p not in allowed_precisions(problem, d) for d in devs):
            return None
        prec.append(p)
    return Plan(op_stage=op_stage, op_precision=tuple(prec), stages=stages, microbatches=microbatches,
                schedule=problem.schedule)


def search(problem: Problem, budget_s: float, seed: int = 0, scorer: Scorer | None = None,
           sensitivity_budget: float | None = None, max_candidates: int | None = None,
           microbatch_counts: Sequence[int] | None = None) -> BaselineResult:
    """Score grid points in a seeded random order until the grid or the budget ends."""
    tr = Tracker(problem, "grid", budget_s, scorer, sensitivity_budget, max_candidates)
    paths = device_paths(problem)
    points = grid_points(problem, microbatch_counts)
    order = np.random.default_rng(seed).permutation(len(points))
    for i in order:
        if tr.expired():
            break
        dp, tp, pp, m, pol, pi = points[int(i)]
        plan = grid_plan(problem, dp, tp, pp, m, pol, paths[pi][1])
        if plan is None:
            tr.idle()
            continue
        tr.evaluate(plan)
    return tr.result()
