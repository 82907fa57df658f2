"""The stage plan space (issue 23): today's uniform cluster space (``model.cluster``)
plus heterogeneous 1F1B pipelines whose every stage has its own tp, dp,
recomputation, ZeRO level and sequence parallelism, found by the stage MILP
(``model.stage_milp``) at each outer point (pipeline depth, microbatch size).

The cluster search runs first; its best plans are candidates and its iteration the
incumbent. Outer points are visited in increasing lower bound (``outer_lb_s``) while
it is below the best MILP objective so far (which starts at the best single-stage
config); each MILP runs with that objective as HiGHS's cutoff. A solution the
memory checker refuses is cut off (no-good) and solved again. Every MILP solution
becomes a plan under each gradient-reduction option, estimated by
``costs.iteration`` (the judge of ranking) and checked; the best ``top_k`` of all
candidates are returned, so the space never does worse than the cluster space.
Algebra and declared space: docs/concepts/stage-milp.md.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from distplan.core.clock import Clock
from distplan.core.errors import DistplanError
from distplan.core.space import BoundKind, SearchResult, Status
from distplan.core.plan import Plan, Stage
from distplan.costs.check import plan_violations
from distplan.costs.iteration import estimate_iteration
from distplan.costs.problem import Problem
from distplan.model.cluster import _Space, batch_variants, plan_cluster, training_precision, training_recipes
from distplan.model.options import DEFAULT_MICROBATCH_SIZES
from distplan.model.progress import Log
from distplan.model.stage_milp import StageMilp, StageSolution, model_memory_bytes, model_objective_s
from distplan.model.stage_terms import (StageConfig, StageTerms, mixed_recipes, recipe_spaces, stage_configs,
                                       stage_terms, undominated)

#: re-solves after the memory checker refuses a MILP solution, per microbatch size (the
#: memory rows bound the checker from below; on 2 layers, 2 x 2 GPUs at 150 MB four
#: refusals came before the plan it accepts)
CHECK_RETRIES = 100
#: the most seconds one MILP may run
MILP_LIMIT_S = 20.0
#: the most (unit, stage, config) triples for which z <= s is stated triple by triple
#: (above: one aggregated row per stage and config; llama3-8b on h100x64, 32 x 8 x 201:
#: 48,405 rows whose root LP did not finish in 30 s, against 4,185 rows and a bound of
#: 1.153 s on an incumbent of 1.510 s)
TIGHT_MAX = 20_000
#: the deepest pipeline the MILP plans (deeper ones: the cluster space's uniform plans)
MAX_STAGES = 8


@dataclass(frozen=True)
class StagePlan:
    """A candidate: the plan, its analytic iteration, its MILP objective (None: from
    the cluster space) and a label."""

    plan: Plan
    iteration_s: float
    model_s: float | None
    label: str
    problem: Problem


@dataclass(frozen=True)
class StageResult:
    """Best plans first; ``points``: the cluster search's counts, then per microbatch
    size the MILP's row."""

    plans: list[StagePlan]
    cluster_best_s: float
    bound_s: float          # the cluster search's bound (uniform plans, analytic model)
    points: list[dict] = field(default_factory=list)
    cut_short: list[str] = field(default_factory=list)
    seconds: float = 0.0


def place(configs: list[StageConfig]) -> list[tuple[int, ...]]:
    """Each stage's devices: consecutive blocks in pipeline order when every block
    starts at a multiple of its tp, else blocks handed out by decreasing tp (a tp
    chain, so every tp group stays inside a node)."""
    offsets = np.concatenate(([0], np.cumsum([c.devices for c in configs])))[:-1]
    order = list(range(len(configs)))
    if any(o % c.tp for o, c in zip(offsets, configs)):
        order.sort(key=lambda k: -configs[k].tp)
    out: list[tuple[int, ...]] = [()] * len(configs)
    at = 0
    for k in order:
        out[k] = tuple(range(at, at + configs[k].devices))
        at += configs[k].devices
    return out


def build_plan(problem: Problem, spaces, split, configs: list[StageConfig], allreduce: str = "ring",
               overlap: bool = False) -> Plan:
    """The 1F1B plan of a unit -> stage ``split`` with each stage at its config, its ops
    at the config's recipe (``spaces``: a ``_Space`` or recipe -> ``_Space``)."""
    by = recipe_spaces(spaces)
    op_stage = [0] * problem.n_ops
    op_precision = list(by[""].op_precision)
    for unit, k in zip(by[""].units, split):
        mine = by[configs[int(k)].precision].op_precision
        for v in unit:
            op_stage[v] = int(k)
            op_precision[v] = mine[v]
    stages = tuple(Stage(devs, c.tp, c.recompute, c.sequence_parallel and c.tp > 1, c.zero)
                   for devs, c in zip(place(configs), configs))
    return Plan(tuple(op_stage), tuple(op_precision), stages, problem.microbatches, "1f1b",
                dp_allreduce=allreduce, overlap_grad_reduce=overlap)


def evaluate(problem: Problem, space, split, configs: list[StageConfig]) -> list[tuple[Plan, float]]:
    """(plan, analytic iteration) under each gradient-reduction option (flat or
    hierarchical ring, overlapped or not), [] when the checker refuses the plan."""
    reps = any(c.dp > 1 for c in configs)
    options = [(a, o) for a in (("ring", "hierarchical") if reps else ("ring",)) for o in
               ((False, True) if reps else (False,))]
    out = []
    for a, o in options:
        plan = build_plan(problem, space, split, configs, a, o)
        if not out and plan_violations(problem, plan):
            return []
        out.append((plan, estimate_iteration(problem, plan).iteration_s))
    return out


def _best_single(t: StageTerms) -> tuple[float, int] | None:
    """(MILP objective, config) of the best one-stage assignment that fits its memory."""
    U = t.fwd.shape[1]
    best = None
    for c in range(len(t.configs)):
        if model_memory_bytes(t, 1, [0] * U, [c])[0] <= t.cap_bytes:
            o = model_objective_s(t, 1, [0] * U, [c])
            if best is None or o < best[0]:
                best = (o, c)
    return best


def uniform_starts(t: StageTerms, index: dict[StageConfig, int], space: _Space, plans, max_stages: int
                   ) -> list[tuple[list[int], list[int]]]:
    """The cluster space's plans (``ClusterPlan``) that lie in the declared space, as
    (split, configs) of ``t`` (a config removed as dominated: the one kept instead)."""
    out = []
    for c in plans:
        pt = c.point
        cfg = StageConfig(pt.tp, pt.dp, pt.recompute, pt.zero, pt.sequence_parallel and pt.tp > 1, pt.precision)
        if pt.vp == 1 and pt.cp == pt.ep == 1 and pt.pp <= max_stages and index.get(cfg, -1) >= 0:
            out.append(([c.plan.op_stage[u[0]] for u in space.units], [index[cfg]] * pt.pp))
    return out


def improve(t: StageTerms, split: list[int], cfgs: list[int], n_devices: int, rounds: int = 20
            ) -> tuple[float, list[int], list[int]]:
    """Hill-climb under the MILP's own objective (a start for HiGHS, whose heuristics are
    weak here): change one stage's config or move one boundary by a unit, keeping the
    budget, dp non-increasing and the memory rows, while that lowers the objective."""
    K, U = len(cfgs), len(split)
    dev = np.array([c.devices for c in t.configs])
    dp = np.array([c.dp for c in t.configs])

    def ok(sp: list[int], cs: list[int]) -> bool:
        return (int(dev[cs].sum()) <= n_devices and all(dp[a] >= dp[b] for a, b in zip(cs, cs[1:]))
                and bool((model_memory_bytes(t, K, sp, cs) <= t.cap_bytes).all()))

    best = model_objective_s(t, K, split, cfgs)
    for _ in range(rounds):
        moves = [(split, cfgs[:k] + [c] + cfgs[k + 1:]) for k in range(K) for c in range(len(t.configs))]
        for u in range(1, U):   # the boundary before unit u moved to after it, or back
            if split[u] != split[u - 1]:
                for v in (u - 1, u):
                    sp = list(split)
                    sp[v] = split[u] if v == u - 1 else split[u - 1]
                    if len(set(sp)) == K:
                        moves.append((sp, cfgs))
        got = min(((model_objective_s(t, K, sp, cs), sp, cs) for sp, cs in moves if ok(sp, cs)),
                  key=lambda x: x[0], default=None)
        if got is None or got[0] >= best * (1 - 1e-12):
            break
        best, split, cfgs = got
    return best, list(split), list(cfgs)


def solve_checked(pb: Problem, spaces, t: StageTerms, milp: StageMilp, budget_s, rel_gap: float,
                  starts=()) -> tuple[StageSolution | None, list[tuple[Plan, float]], int]:
    """The MILP's best assignment the memory checker accepts (started from the best of
    ``starts`` and the best one-stage config under the MILP's model; each refused one
    cut off and solved again, ``CHECK_RETRIES`` times at most), its plans under every
    reduction option, and how many were refused. ``budget_s()``: the seconds the next
    solve may take."""
    single = _best_single(t)
    units = len(recipe_spaces(spaces)[""].units)
    cands = [(single[0], [0] * units, [single[1]])] if single is not None else []
    for split, cfgs in starts:
        if (model_memory_bytes(t, len(cfgs), split, cfgs) <= t.cap_bytes).all():
            cands.append((model_objective_s(t, len(cfgs), split, cfgs), split, cfgs))
    if cands:
        _, split, cfgs = min((improve(t, list(sp), list(cs), pb.n_devices) for _, sp, cs in cands),
                             key=lambda x: x[0])
        milp.start(split, cfgs)
    for refused in range(CHECK_RETRIES + 1):
        budget = budget_s()
        if budget <= 0:
            break
        sol = milp.solve(budget, rel_gap=rel_gap)
        if sol is None:
            break
        got = evaluate(pb, spaces, sol.split, [t.configs[c] for c in sol.configs])
        if got:
            return sol, got, refused
        milp.forbid(sol.split, sol.configs)   # over the checker's memory: cut it off
    return None, [], refused


def plan_stages(problem: Problem, clock: Clock, top_k: int = 5, microbatch_sizes=(),
                progress=None, max_stages: int = MAX_STAGES, rel_gap: float = 1e-3) -> StageResult:
    """The stage space's best plans (module docstring): the cluster search, then per
    microbatch size one MILP over every depth up to ``max_stages``, started from the
    best one-stage config, within an equal share of the time left."""
    t0 = time.perf_counter()
    say = progress or (lambda _: None)
    prec = training_precision(problem)
    cl = plan_cluster(problem, top_k=top_k, progress=progress, clock=clock, microbatch_sizes=microbatch_sizes)
    cands = [StagePlan(c.plan, c.iteration_s, None, f"uniform {c.point.label()}",
                       c.problem if c.problem is not None else problem) for c in cl.plans]
    cut, rows = list(cl.cut_short), []
    variants = list(batch_variants(problem, microbatch_sizes).values())
    for left, pb in zip(range(len(variants), 0, -1), variants):
        if clock.remaining_s() <= 0:
            cut.append(f"stage space: microbatch size {pb.graph.batch_size} not solved "
                       f"({'interrupted' if clock.stop is not None and clock.stop.requested else 'time'})")
            continue
        t1 = time.perf_counter()
        space = _Space(pb, prec)
        spaces = {r: _Space(pb, r, prec) if r else space for r in training_recipes(pb)}
        if not mixed_recipes(pb, spaces):   # boundaries would depend on the stage before: bf16 alone
            spaces = {"": space}
        t, index = undominated(stage_terms(pb, spaces, stage_configs(pb, recipes=tuple(spaces))))
        K = min(len(space.units), pb.n_devices, max_stages)
        starts = uniform_starts(t, index, space, [c for c in cl.plans if (c.problem or problem).graph.batch_size
                                                  == pb.graph.batch_size], K)
        milp = StageMilp(t, K, pb.n_devices, tight=len(space.units) * K * len(t.configs) <= TIGHT_MAX)
        row = {"microbatch_size": pb.graph.batch_size, "max_stages": K, "configs": len(t.configs),
               "binaries": milp.n_binaries, "rows": milp.n_rows}
        end = time.perf_counter() + min(MILP_LIMIT_S, clock.remaining_s() / left)   # for all its re-solves
        sol, got, refused = solve_checked(pb, spaces, t, milp, lambda: min(end - time.perf_counter(),
                                                                          clock.remaining_s()), rel_gap, starts)
        row["refused"] = refused
        if got:
            cfgs = [t.configs[c] for c in sol.configs]
            label = " | ".join(f"{c.label()} x {sol.split.count(k)} layers" for k, c in enumerate(cfgs))
            cands += [StagePlan(p, it, sol.objective_s, f"stages: {label}", pb) for p, it in got]
            row.update(objective_s=sol.objective_s, bound_s=sol.bound_s, status=sol.status, pp=len(cfgs),
                       iteration_s=min(it for _, it in got), plan=label)
        row["seconds"] = time.perf_counter() - t1
        rows.append(row)
        say(f"stage space: microbatch size {pb.graph.batch_size}, up to {K} stages: "
            + (f"{row['objective_s']:.6g} s, bound {row['bound_s']:.6g} s ({row['plan']})" if "plan" in row
               else "no plan") + f" in {row['seconds']:.2f} s")
    cands.sort(key=lambda c: c.iteration_s)
    counts = {"points": cl.points, "visited": cl.solved, "pruned": cl.pruned, "infeasible": cl.infeasible,
              "precision": cl.precision}   # the cluster search's, as the report reads them
    return StageResult(cands[:top_k], cl.plans[0].iteration_s, cl.bound_s, [counts, *rows], cut,
                       time.perf_counter() - t0)


def search_stage(problem: Problem, options, clock: Clock) -> SearchResult:
    """Search the stage space within the clock (``options``: ``model.options.SolveOptions``;
    its microbatch sizes and top_k). Plans carry their analytic iteration
    (``predicted['model_iteration_s']``) and, from the MILP, ``stage_milp_objective_s``.
    Bound: the cluster search's, under the analytic model over the uniform plans (the
    MILP's objective approximates the estimate, so its own bound is not one on it)."""
    if not problem.training:
        raise DistplanError("the stage plan space plans training; use --space cluster for inference latency")
    if len(set(problem.device_kind.tolist())) != 1:
        raise DistplanError("the stage plan space needs one device kind; mixed fleets use --space fleet")
    if options.virtual_stages:
        raise DistplanError("--virtual-stages does not apply to the stage space (1F1B); use --space cluster")
    say = Log(options.progress)
    sizes = DEFAULT_MICROBATCH_SIZES if options.microbatch_sizes is None else options.microbatch_sizes
    res = plan_stages(problem, clock, top_k=options.top_k, microbatch_sizes=sizes, progress=say)
    chosen = res.plans[0].problem
    plans = [c.plan.with_predicted(milp_objective=c.iteration_s, model_iteration_s=c.iteration_s,
                                   cluster_point=c.label,
                                   **({"stage_milp_objective_s": c.model_s} if c.model_s is not None else {}))
             for c in res.plans if c.problem is chosen]
    clock.cut_short.extend(res.cut_short)
    best = res.plans[0]
    status = Status(clock.why()) if clock.cut_short else Status.SEARCHED
    return SearchResult("stage", status, tuple(plans), best.iteration_s, min(res.bound_s, best.iteration_s),
                        BoundKind.ANALYTIC, analytic=True, cut_short=tuple(clock.cut_short),
                        seconds=clock.elapsed_s(), problem=chosen if chosen is not problem else None,
                        replicas=best.plan.stages[0].replicas, explored=tuple(res.points), log=tuple(say.lines))
