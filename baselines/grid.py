"""Grid search over data x tensor x pipeline degrees and microbatch counts, the way
DistIR (Santhanam et al. 2021) explores strategies.

A grid point is (dp, tp, pp, microbatches, precision, and in training recomputation /
ZeRO 0-3 / sequence parallelism), each degree a divisor of the device count and dp * tp *
pp <= devices: the layers split into ``pp`` stages of equal layer counts
(``costs.megatron.stage_of_ops``; equal operator counts without layer names), training
keeps the problem's microbatch count, stage k takes the next ``dp * tp`` devices along a
device path family as ``dp`` replicas of ``tp`` devices, and every op runs at one
precision (each allowed one in turn, or each op's fastest). Points are visited in a
seeded random order (a budget that ends early still samples the grid evenly); infeasible
points are rejected by the feasibility gate; the best scored one is returned.
Tensor-parallel points need a scorer that models them (the simulator does; with the
analytic period they are skipped).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from distplan.baselines.result import BaselineResult, Tracker
from distplan.core.clock import Clock
from distplan.baselines.scoring import Scorer
from distplan.baselines.space import allowed_precisions, device_paths, fastest_precision
from distplan.costs.problem import Problem
from distplan.core.errors import DistplanError
from distplan.core.plan import RECOMPUTE, Plan, Stage
from distplan.costs.megatron import stage_of_ops
from distplan.costs.sharding import searched_zero_levels


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def default_microbatch_counts(problem: Problem) -> tuple[int, ...]:
    """Inference: half, the problem's, and twice its microbatch count. Training: the
    problem's alone (the global batch is the user's; a plan with more microbatches would
    train on more samples per step)."""
    m = problem.microbatches
    if problem.training:
        return (m,)
    return tuple(sorted({max(1, m // 2), m, 2 * m}))


def training_options(problem: Problem, dp: int, tp: int, pp: int = 1) -> list[tuple[str, int, bool]]:
    """(recompute, ZeRO level, sequence parallel) variants of a training grid point (one,
    all off, in inference); the levels are the cluster space's (costs.sharding)."""
    if not problem.training:
        return [("none", 0, False)]
    return [(rc, z, sp) for rc in RECOMPUTE for z in searched_zero_levels(dp, tp, pp)
            for sp in ((False, True) if tp > 1 else (False,))]


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
        for tp in (t for t in degs if problem.graph.tp_fits(t)):   # Megatron splits attention by heads
            for dp in degs:
                if dp * tp * pp > D:
                    continue
                for m in mbs:
                    for pol in policies:
                        for pi in range(n_paths):
                            for opt in training_options(problem, dp, tp, pp):
                                out.append((dp, tp, pp, m, pol, pi, opt))
    return out


def grid_plan(problem: Problem, dp: int, tp: int, pp: int, microbatches: int, policy: str,
              path: Sequence[int], options: tuple[str, int, bool] = ("none", 0, False)) -> Plan | None:
    """The plan of one grid point (None if a stage's devices cannot run the policy)."""
    g = dp * tp
    try:
        op_stage = stage_of_ops(problem, pp)   # equal layer counts (equal op counts without layers)
    except DistplanError:
        return None
    rc, zero, sp = options
    stages = tuple(Stage(tuple(int(d) for d in path[k * g:(k + 1) * g]), tensor_parallel=tp, recompute=rc,
                         sequence_parallel=sp, zero=zero) for k in range(pp))
    # what a device may run depends on its kind alone: one device of each kind per stage
    kind_devs = [tuple({int(problem.device_kind[d]): d for d in reversed(st.devices)}.values()) for st in stages]
    prec = []
    for v, k in enumerate(op_stage):
        devs = stages[k].devices
        if policy == "fastest":
            p = fastest_precision(problem, v, devs[0])
        else:
            q = problem.fallback_q(v, problem.q_index(policy), int(problem.device_kind[devs[0]]))
            if q is None:
                return None
            p = problem.precisions[q]   # the policy's precision where op v may use it (int8: matrix products)
        if any(p not in allowed_precisions(problem, d, v) for d in kind_devs[k]):
            return None
        prec.append(p)
    return Plan(op_stage=op_stage, op_precision=tuple(prec), stages=stages, microbatches=microbatches,
                schedule=problem.schedule)


def search(problem: Problem, budget_s: float, seed: int = 0, scorer: Scorer | None = None,
           sensitivity_budget: float | None = None, max_candidates: int | None = None,
           microbatch_counts: Sequence[int] | None = None, clock: Clock | None = None) -> BaselineResult:
    """Score grid points in a seeded random order until the grid or the budget ends."""
    tr = Tracker(problem, "grid", budget_s, scorer, sensitivity_budget, max_candidates, clock)
    paths = device_paths(problem)
    points = grid_points(problem, microbatch_counts)
    order = np.random.default_rng(seed).permutation(len(points))
    for i in order:
        if tr.expired():
            break
        dp, tp, pp, m, pol, pi, opt = points[int(i)]
        plan = grid_plan(problem, dp, tp, pp, m, pol, paths[pi][1], opt)
        if plan is None:
            tr.idle()
            continue
        tr.evaluate(plan)
    return tr.result()
