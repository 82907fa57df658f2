"""Grid search over data x tensor x pipeline degrees and microbatch counts, the way
DistIR (Santhanam et al. 2021) explores strategies.

A grid point is (dp, tp, pp, microbatches, precision policy, and in training
recomputation / ZeRO 0-3 / sequence parallelism), each degree a divisor of the device
count and dp * tp * pp <= devices: the layers split into ``pp`` stages of equal layer
counts (``costs.megatron.stage_of_ops``; equal operator counts without layer names),
training keeps the problem's microbatch count, stage k takes the next ``dp * tp`` devices
along a device path family as ``dp`` replicas of ``tp`` devices, and every op runs at one
precision (each allowed one in turn, or each op's fastest) or, in training, under the
fp8 recipe where the cluster space offers it (``model.cluster.training_recipes``: fp8
linear layers, the rest at the training precision, ``costs.megatron.fp8_training_precisions``).

Training points also search what the cluster space searches besides (``GridOptions``):
context parallelism (cp) and expert parallelism (ep) at the cluster space's degrees
(``baselines.grid_ranks``: a zoo transformer's training only; dp x cp x tp x pp devices,
ep dividing dp), each such point simulated on its own timed rank problem and laid out as
the cluster space lays it out (device order, no path families); and Megatron's
interleaved 1F1B at the virtual stages the caller asks (``virtual_stages``, the cluster
space's option and rule: pp >= 2, pp x vp dividing the layers, pp the microbatches a
replica runs, no ep). A cp point's rank problem runs ``microbatches x cp`` sequences of
``seq_len / cp`` tokens: its score counts whole sequences (divided by cp).

Points are visited in a seeded random order (a budget that ends early still samples the
grid evenly); infeasible points are rejected by the feasibility gate; the best scored
one is returned, with its problem where that is a rank problem. Tensor-parallel points
need a scorer that models them (the simulator does; with the analytic period they are
skipped).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from distplan.baselines.grid_ranks import GridRanks
from distplan.baselines.result import BaselineResult, Tracker
from distplan.core.clock import Clock
from distplan.baselines.scoring import Scorer
from distplan.baselines.space import allowed_precisions, device_paths, fastest_precision
from distplan.costs.problem import Problem
from distplan.core.errors import DistplanError
from distplan.core.plan import RECOMPUTE, Plan, Stage
from distplan.costs.expert_parallel import expert_plan
from distplan.costs.megatron import fp8_training_precisions, stage_of_ops
from distplan.costs.sharding import searched_zero_levels
from distplan.model.cluster import interleave_degrees, interleave_layers, training_precision, training_recipes

#: the precision policy of the fp8 training recipe (``model.cluster.training_recipes``)
FP8_RECIPE = "fp8 recipe"
#: the path index of a cp / ep point: the devices in order (``baselines.grid_ranks``)
DEVICE_ORDER = -1


@dataclass(frozen=True)
class GridOptions:
    """What the grid searches besides dp x tp x pp: ``virtual_stages`` (interleaved 1F1B
    at these vp >= 2; none by default), ``context_parallel`` / ``expert_parallel`` (the cp
    / ep degrees besides 1; None: the cluster space's defaults, ``model.cluster_ranks``;
    (): none), ``ep_dispatcher`` (how the ep points move tokens). The names and meanings of
    ``SolveOptions``' fields of the same names."""

    virtual_stages: tuple[int, ...] = ()
    context_parallel: tuple[int, ...] | None = None
    expert_parallel: tuple[int, ...] | None = None
    ep_dispatcher: str = "alltoall"

    @classmethod
    def of(cls, options) -> GridOptions:
        """The grid options of a ``SolveOptions`` (its fields of the same names)."""
        return cls(tuple(getattr(options, "virtual_stages", ()) or ()), getattr(options, "context_parallel", None),
                   getattr(options, "expert_parallel", None), getattr(options, "ep_dispatcher", "alltoall"))


class GridPoint(NamedTuple):
    """One point: its degrees, microbatch count, precision policy, path index
    (``DEVICE_ORDER`` for cp / ep points), training options (recompute, ZeRO, sequence
    parallel), context / expert parallel degrees and virtual stages."""

    dp: int
    tp: int
    pp: int
    microbatches: int
    policy: str
    path: int
    options: tuple[str, int, bool]
    cp: int = 1
    ep: int = 1
    vp: int = 1


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


def training_options(problem: Problem, dp: int, tp: int, pp: int = 1, vp: int = 1) -> list[tuple[str, int, bool]]:
    """(recompute, ZeRO level, sequence parallel) variants of a training grid point (one,
    all off, in inference); the levels are the cluster space's (costs.sharding; ``dp``:
    the replicas of a stage, dp x cp)."""
    if not problem.training:
        return [("none", 0, False)]
    return [(rc, z, sp) for rc in RECOMPUTE for z in searched_zero_levels(dp, tp, pp, vp)
            for sp in ((False, True) if tp > 1 else (False,))]


def precision_policies(problem: Problem) -> tuple[str, ...]:
    """"fastest", every allowed precision, and in training ``FP8_RECIPE`` where the
    cluster space tries the fp8 recipe (``model.cluster.training_recipes``)."""
    out = ("fastest", *problem.precisions)
    if problem.training:
        try:
            training_precision(problem)
        except DistplanError:
            return out
        if "fp8" in training_recipes(problem):
            out += (FP8_RECIPE,)
    return out


def _vps(problem: Problem, virtual_stages: Sequence[int], dp: int, pp: int, m: int, ep: int, L: int) -> list[int]:
    """1 and the asked vp (>= 2) that interleave this point: the cluster space's rule
    (``model.cluster.interleave_degrees``) on its ``m / dp`` microbatches a replica."""
    if not problem.training or m % dp:
        return [1]
    return interleave_degrees(virtual_stages, L, pp, m // dp, ep)


def grid_points(problem: Problem, microbatch_counts: Sequence[int] | None = None,
                options: GridOptions | None = None, ranks: GridRanks | None = None) -> list[GridPoint]:
    """Every point of the grid: the plain dp x tp x pp points on every path family, then
    (training, zoo transformers) the cp / ep points in device order (``ranks``: their
    degrees; built from ``options`` when not given)."""
    options = options or GridOptions()
    if ranks is None:
        ranks = GridRanks(problem, options.context_parallel, options.expert_parallel, options.ep_dispatcher)
    D, V = len(device_paths(problem)[0][1]), problem.n_ops
    mbs = tuple(microbatch_counts or default_microbatch_counts(problem))
    policies = precision_policies(problem)
    n_paths = len(device_paths(problem))
    L = interleave_layers(problem) if options.virtual_stages else 0
    out = []
    for cp in ranks.cps:
        for ep in ranks.eps:
            plain = cp == ep == 1
            N = D if plain else problem.n_devices
            degs = divisors(N)
            paths = range(n_paths) if plain else (DEVICE_ORDER,)
            for pp in degs:
                if pp > V:
                    continue
                for tp in (t for t in degs if problem.graph.tp_fits(t)):   # Megatron splits attention by heads
                    for dp in degs:
                        if dp * cp * tp * pp > N or dp % ep:
                            continue
                        for m in mbs:
                            for vp in _vps(problem, options.virtual_stages, dp, pp, m, ep, L):
                                for pol in policies:
                                    for pi in paths:
                                        for opt in training_options(problem, dp * cp, tp, pp, vp):
                                            out.append(GridPoint(dp, tp, pp, m, pol, pi, opt, cp, ep, vp))
    return out


def grid_plan(problem: Problem, dp: int, tp: int, pp: int, microbatches: int, policy: str,
              path: Sequence[int], options: tuple[str, int, bool] = ("none", 0, False), vp: int = 1,
              cp: int = 1, ep: int = 1) -> Plan | None:
    """The plan of one grid point on ``problem`` (a cp / ep point's: its rank problem;
    ``dp``: the replicas of a stage, dp x cp), None if a stage's devices cannot run the
    policy; ``vp`` > 1: pp x vp equal chunks, chunk c on stage c mod pp's devices
    (interleaved 1F1B); ``ep``: expert-parallel blocks ``cp`` replicas apart
    (``costs.expert_parallel.expert_plan``); a cp plan carries ``predicted['context_parallel']``
    (whole sequences in reports and replays)."""
    g = dp * tp
    try:
        op_stage = stage_of_ops(problem, pp * vp)   # equal layer counts (equal op counts without layers)
    except DistplanError:
        return None
    rc, zero, sp = options
    ranks = tuple(Stage(tuple(int(d) for d in path[k * g:(k + 1) * g]), tensor_parallel=tp, recompute=rc,
                        sequence_parallel=sp, zero=zero) for k in range(pp))
    stages = tuple(ranks[c % pp] for c in range(pp * vp))
    # what a device may run depends on its kind alone: one device of each kind per stage
    kind_devs = [tuple({int(problem.device_kind[d]): d for d in reversed(st.devices)}.values()) for st in stages]
    recipe = _recipe(problem) if policy == FP8_RECIPE else None
    prec = []
    for v, k in enumerate(op_stage):
        devs = stages[k].devices
        if recipe is not None:
            p = recipe[v]
        elif policy == "fastest":
            p = fastest_precision(problem, v, devs[0])
        else:
            q = problem.fallback_q(v, problem.q_index(policy), int(problem.device_kind[devs[0]]))
            if q is None:
                return None
            p = problem.precisions[q]   # the policy's precision where op v may use it (int8: matrix products)
        if any(p not in allowed_precisions(problem, d, v) for d in kind_devs[k]):
            return None
        prec.append(p)
    plan = Plan(op_stage=op_stage, op_precision=tuple(prec), stages=stages, microbatches=microbatches,
                schedule="interleaved" if vp > 1 else problem.schedule)
    plan = expert_plan(plan, ep, cp)
    return plan.with_predicted(context_parallel=cp) if cp > 1 else plan


def _recipe(problem: Problem) -> tuple[str, ...]:
    return fp8_training_precisions(problem, training_precision(problem))


def space_line(problem: Problem, options: GridOptions | None = None, points: int | None = None,
               ranks: GridRanks | None = None) -> str:
    """What the grid searches, one line (the baseline's progress line)."""
    options = options or GridOptions()
    if ranks is None:
        ranks = GridRanks(problem, options.context_parallel, options.expert_parallel, options.ep_dispatcher)
    what = ["dp x tp x pp", "microbatches " + "/".join(map(str, default_microbatch_counts(problem))),
            "precision " + "/".join(precision_policies(problem))]
    if problem.training:
        what.append("recomputation, ZeRO, sequence parallel")
        if ranks.line():
            what.append(ranks.line())
        vps = [vp for vp in sorted(set(options.virtual_stages)) if vp >= 2]
        if vps:
            what.append("vp " + "/".join(map(str, vps)))
    n = f"{points:,} points: " if points is not None else ""
    return f"grid: {n}{', '.join(what)}"


def search(problem: Problem, budget_s: float, seed: int = 0, scorer: Scorer | None = None,
           sensitivity_budget: float | None = None, max_candidates: int | None = None,
           microbatch_counts: Sequence[int] | None = None, clock: Clock | None = None,
           options: GridOptions | None = None) -> BaselineResult:
    """Score grid points in a seeded random order until the grid or the budget ends
    (``options``: ``GridOptions``, the cp / ep / vp it searches besides)."""
    tr = Tracker(problem, "grid", budget_s, scorer, sensitivity_budget, max_candidates, clock)
    options = options or GridOptions()
    ranks = GridRanks(problem, options.context_parallel, options.expert_parallel, options.ep_dispatcher)
    paths = device_paths(problem)
    points = grid_points(problem, microbatch_counts, options, ranks)
    tr.note(space_line(problem, options, len(points), ranks))
    order = np.random.default_rng(seed).permutation(len(points))
    for i in order:
        if tr.expired():
            break
        pt = points[int(i)]
        pb = ranks.problem_of(pt.dp, pt.tp, pt.pp, pt.options[2], pt.cp, pt.ep)
        if pb is None:
            tr.idle()
            continue
        path = paths[pt.path][1] if pt.path != DEVICE_ORDER else tuple(range(problem.n_devices))
        m = pt.microbatches * pt.cp   # a cp rank problem's microbatches (``model.cluster_ranks``)
        plan = grid_plan(pb, pt.dp * pt.cp, pt.tp, pt.pp, m, pt.policy, path, pt.options, pt.vp, pt.cp, pt.ep)
        if plan is None:
            tr.idle()
            continue
        tr.evaluate(plan, pb, pt.cp)
    return tr.result()
