"""The stage plan space (issue 23): today's uniform cluster space (``model.cluster``)
plus heterogeneous 1F1B pipelines whose every stage has its own tp, dp,
recomputation, ZeRO level and sequence parallelism, found by the stage MILP
(``model.stage_milp``) at each outer point (pipeline depth, microbatch size).

The cluster search runs first; its best plans are candidates. Then, per microbatch
size, the MILP's terms, its best start (``best_start``: the best one-stage config and
the cluster space's plans in the declared space, hill-climbed) and a lower bound of its
objective (``stage_milp.objective_lb_s``). The least start objective the memory
checker accepts is the incumbent; the sizes are visited in increasing start objective,
one whose bound reaches the incumbent is pruned (no MILP built), the others are solved
with the incumbent as HiGHS's cutoff (kInfeasible: proven to hold nothing below it),
each better plan lowering it. A solution the memory checker refuses is cut off (no-good)
and solved again. Every MILP solution becomes a plan under each gradient-reduction
option, estimated by ``costs.iteration`` (the judge of ranking) and checked; the cluster
space's own plans are all returned, with the MILP's plans that enter the best ``top_k``
by the estimate beside them (at most 2 x ``top_k``), so the plans simulated include the
cluster space's and the space never does worse than it in the simulator.
Algebra and declared space: docs/concepts/stage-milp.md.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from distplan.core.clock import Clock
from distplan.core.errors import DistplanError
from distplan.core.space import BoundKind, SearchResult, Status
from distplan.core.plan import Plan, Stage
from distplan.costs.check import plan_violations
from distplan.costs.iteration import Exceeds, estimate_iteration
from distplan.costs.problem import Problem
from distplan.model.cluster import _Space, batch_variants, plan_cluster, training_precision, training_recipes
from distplan.model.options import DEFAULT_MICROBATCH_SIZES
from distplan.model.progress import Log
from distplan.model.stage_milp import (StageMilp, StageSolution, config_lb_s, model_memory_bytes,
                                      model_objective_s, objective_lb_s)
from distplan.model.stage_terms import (StageConfig, StageTerms, mixed_recipes, recipe_spaces, stage_configs,
                                       stage_terms, undominated)

#: re-solves after the memory checker refuses a MILP solution, per microbatch size (the
#: memory rows bound the checker from below; on 2 layers, 2 x 2 GPUs at 150 MB four
#: refusals came before the plan it accepts)
CHECK_RETRIES = 100
#: the most seconds one MILP may run
MILP_LIMIT_S = 20.0
#: the memory checker's questions a hill-climbing round may ask (its best moves in turn)
FIT_TRIES = 8
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


def reduction_options(configs: list[StageConfig]) -> list[tuple[str, bool]]:
    """The gradient-reduction options ``evaluate`` times: (flat ring or hierarchical,
    overlapped or not) where a stage has replicas, else the flat ring alone."""
    reps = any(c.dp > 1 for c in configs)
    return [(a, o) for a in (("ring", "hierarchical") if reps else ("ring",)) for o in
            ((False, True) if reps else (False,))]


def row_iteration(got: list[tuple[Plan, float]], options: int, above_s: float) -> dict:
    """A size's row: the least iteration of its timed options, or, where ``evaluate``
    left some out (proven at least ``above_s``) and the timed ones all lie above it,
    only that the size's best is at least ``above_s`` (the untimed option may be the
    best: gpt3-2.7b size 4 showed 0.367 s where its best option is 0.2831 s)."""
    best = min((it for _, it in got), default=None)
    if len(got) < options and (best is None or best > above_s):
        return {"iteration_s": None, "iteration_at_least_s": above_s}
    return {"iteration_s": best}


def evaluate(problem: Problem, space, split, configs: list[StageConfig], above_s: float = math.inf
             ) -> list[tuple[Plan, float]] | None:
    """(plan, analytic iteration) under each gradient-reduction option (flat or
    hierarchical ring, overlapped or not) whose iteration may lie below ``above_s``
    (``costs.iteration.Exceeds``: the options proven at least ``above_s`` are left out,
    their buckets not timed), None when the checker refuses the plan."""
    out: list[tuple[Plan, float]] = []
    for i, (a, o) in enumerate(reduction_options(configs)):
        plan = build_plan(problem, space, split, configs, a, o)
        if i == 0 and plan_violations(problem, plan):
            return None
        try:
            out.append((plan, estimate_iteration(problem, plan, above_s=above_s).iteration_s))
        except Exceeds:
            pass
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


def improve(t: StageTerms, split: list[int], cfgs: list[int], n_devices: int, rounds: int = 20,
            fits: Callable[[list[int], list[int]], bool] | None = None, tries: int = FIT_TRIES
            ) -> tuple[float, list[int], list[int]]:
    """Hill-climb under the MILP's own objective (a start for HiGHS, whose heuristics are
    weak here): change one stage's config or move one boundary by a unit, keeping the
    budget, dp non-increasing and the memory rows, while that lowers the objective.
    ``fits``: the memory checker, asked of the ``tries`` best moves of a round in turn
    (the rows bound it from below: the best move under them may not fit)."""
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
        scored = sorted(((model_objective_s(t, K, sp, cs), i) for i, (sp, cs) in enumerate(moves) if ok(sp, cs)))
        got = None
        for o, i in scored[:tries if fits is not None else 1]:
            if o >= best * (1 - 1e-12):
                break
            if fits is None or fits(*moves[i]):
                got = (o, *moves[i])
                break
        if got is None:
            break
        best, split, cfgs = got
    return best, list(split), list(cfgs)


def best_start(pb: Problem, spaces, t: StageTerms, starts=()) -> tuple[float, list[int], list[int]] | None:
    """The best of ``starts`` (that fit the memory rows) and the best one-stage config,
    each hill-climbed under the MILP's objective through moves the memory checker
    accepts: (objective, split, configs), the best climb the checker accepts (else the
    best climb), None when none fits the rows. The rows bound the checker from below, so
    a climb under them alone can end where the checker refuses, and HiGHS, started
    there, may have only refused plans when its time runs out (llama3-70b on h100x16:
    no stage plan at all, though full x 3 | selective fits)."""
    single = _best_single(t)
    units = len(recipe_spaces(spaces)[""].units)
    cands = [(single[0], [0] * units, [single[1]])] if single is not None else []
    for split, cfgs in starts:
        if (model_memory_bytes(t, len(cfgs), split, cfgs) <= t.cap_bytes).all():
            cands.append((model_objective_s(t, len(cfgs), split, cfgs), split, cfgs))

    def fits(sp: list[int], cs: list[int]) -> bool:
        return not plan_violations(pb, build_plan(pb, spaces, sp, [t.configs[c] for c in cs]))

    climbed = sorted((improve(t, list(sp), list(cs), pb.n_devices, fits=fits) for _, sp, cs in cands),
                     key=lambda x: x[0])
    return next((c for c in climbed if fits(c[1], c[2])), climbed[0] if climbed else None)


def solve_checked(pb: Problem, spaces, t: StageTerms, milp: StageMilp, budget_s, rel_gap: float,
                  starts=(), cutoff_s: float = math.inf, start=None, known: dict | None = None,
                  above_s=lambda: math.inf) -> tuple[StageSolution | None, list[tuple[Plan, float]], int]:
    """The MILP's best assignment the memory checker accepts (started from ``start``, by
    default ``best_start`` of ``starts``; each refused one cut off and solved again,
    ``CHECK_RETRIES`` times at most), its plans under every reduction option, and how
    many were refused. ``budget_s()``: the seconds the next solve may take. ``cutoff_s``:
    the objective of a plan the checker accepts: only assignments below it are sought
    (none found: ``milp.status`` "kInfeasible" when HiGHS proved none lies below it).
    ``known``: (split, configs) -> its ``evaluate``, already done. ``above_s()``: the
    iteration from which a plan no longer matters (``evaluate``: its options proven at
    least that are left out, so the plans may be [] though the solution is accepted)."""
    if start is None:
        start = best_start(pb, spaces, t, starts)
    if start is not None:
        milp.start(start[1], start[2])
    for refused in range(CHECK_RETRIES + 1):
        budget = budget_s()
        if budget <= 0:
            break
        sol = milp.solve(budget, rel_gap=rel_gap, cutoff_s=cutoff_s)
        if sol is None:
            break
        got = (known or {}).get((sol.split, sol.configs))
        if got is None:
            got = evaluate(pb, spaces, sol.split, [t.configs[c] for c in sol.configs], above_s())
        if got is not None:
            return sol, got, refused
        milp.forbid(sol.split, sol.configs)   # over the checker's memory: cut it off
    return None, [], refused


@dataclass
class _Point:
    """One outer point (a microbatch size) made ready: its problem, recipe spaces, terms,
    depth, the MILP's lower bound (``objective_lb_s``), the seconds spent on it and, once
    ``with_start`` ran, the best start (None: none fits)."""

    pb: Problem
    spaces: dict
    t: StageTerms
    K: int
    lb_s: float
    seconds: float
    uniform: list   # the cluster space's plans in the declared space, as (split, configs) of t
    start: tuple[float, list[int], list[int]] | None = None


def _prepare(pb: Problem, prec: str, plans, max_stages: int, made: dict | None = None) -> _Point:
    """The outer point of ``pb`` (``made``: recipe -> the cluster search's spaces of it,
    their work tables reused), its start not yet sought (``with_start``)."""
    t1 = time.perf_counter()
    made = made or {}
    space = made.get("") or _Space(pb, prec)
    spaces = {r: made.get(r) or (_Space(pb, r, prec) if r else space) for r in training_recipes(pb)}
    if not mixed_recipes(pb, spaces):   # boundaries would depend on the stage before: bf16 alone
        spaces = {"": space}
    t, index = undominated(stage_terms(pb, spaces, stage_configs(pb, recipes=tuple(spaces))))
    K = min(len(space.units), pb.n_devices, max_stages)
    return _Point(pb, spaces, t, K, objective_lb_s(t, pb.n_devices), time.perf_counter() - t1,
                  uniform_starts(t, index, space, plans, K))


def with_start(q: _Point) -> _Point:
    """``q`` with its best start (``best_start``), its seconds counted."""
    t1 = time.perf_counter()
    q.start = best_start(q.pb, q.spaces, q.t, q.uniform)
    q.seconds += time.perf_counter() - t1
    return q


def narrowed(q: _Point, cutoff_s: float, held_plans=None) -> tuple[StageTerms, tuple | None, dict | None]:
    """The terms the MILP of ``q`` needs below ``cutoff_s``: without the configs whose own
    lower bound (``stage_milp.config_lb_s``) reaches it (the start's always kept, so
    HiGHS may start there), with the start and, when the start is the incumbent,
    ``held_plans`` (its ``evaluate``) keyed in the kept configs' indices."""
    keep = config_lb_s(q.t, q.pb.n_devices) < cutoff_s
    if q.start is not None:
        keep[list(q.start[2])] = True
    idx = np.flatnonzero(keep)
    if len(idx) == len(q.t.configs):
        t, start = q.t, q.start
    else:
        pos = {int(c): i for i, c in enumerate(idx)}
        t = q.t.take(idx)
        start = None if q.start is None else (q.start[0], q.start[1], [pos[c] for c in q.start[2]])
    known = None if held_plans is None or start is None else {(tuple(start[1]), tuple(start[2])): held_plans}
    return t, start, known


def _label(t: StageTerms, split, configs) -> str:
    cfgs = [t.configs[c] for c in configs]
    return " | ".join(f"{c.label()} x {list(split).count(k)} layers" for k, c in enumerate(cfgs))


def plan_stages(problem: Problem, clock: Clock, top_k: int = 5, microbatch_sizes=(),
                progress=None, max_stages: int = MAX_STAGES, rel_gap: float = 1e-3,
                milp_share: float | None = None) -> StageResult:
    """The stage space's best plans (module docstring): the cluster search, then per
    microbatch size one MILP over every depth up to ``max_stages``. Every size's best
    start (``best_start``) is found first; the least objective among those the checker
    accepts is the incumbent, and the sizes are solved in increasing start objective, each
    with the incumbent as HiGHS's cutoff (a size with nothing below it is proven so and
    left), each within an equal share of the time left, the incumbent lowered by every
    better plan found. ``milp_share``: the phase after the cluster search (terms, starts,
    MILPs) gets at most this share of the cluster search's own wall seconds; a size it
    leaves unsolved, or whose MILP it stops, is listed in ``cut_short`` ("MILP budget")
    and its row says so (the incumbent, a plan the checker accepts, and the cluster
    space's plans are kept, so the result is never worse than the cluster space's)."""
    t0 = time.perf_counter()
    say = progress or (lambda _: None)
    prec = training_precision(problem)
    cl = plan_cluster(problem, top_k=top_k, progress=progress, clock=clock, microbatch_sizes=microbatch_sizes)
    uniform = [StagePlan(c.plan, c.iteration_s, None, f"uniform {c.point.label()}",
                         c.problem if c.problem is not None else problem) for c in cl.plans]
    found: list[StagePlan] = []   # the MILP's plans
    cut, rows, points = list(cl.cut_short), [], []
    cluster_s = time.perf_counter() - t0
    phase_end = math.inf if milp_share is None else time.perf_counter() + milp_share * cluster_s
    incumbent = math.inf

    def left_s() -> float:   # the seconds the MILP phase has left: the clock's, or its budget's
        return min(clock.remaining_s(), phase_end - time.perf_counter())

    def why() -> str:
        if clock.stop is not None and clock.stop.requested:
            return "interrupted"
        if clock.remaining_s() > 0 and phase_end - time.perf_counter() <= 0:
            return f"MILP budget: {milp_share:g} x the cluster search's {cluster_s:.2f} s"
        return "time"

    def unsolved(b: int) -> None:   # a size the phase leaves unsolved: its row and cut-short line
        rows.append({"microbatch_size": b, "status": f"not solved ({why()})", "start_s": None, "bound_s": None,
                     "cutoff_s": incumbent, "seconds": 0.0})
        cut.append(f"stage space: microbatch size {b} not solved ({why()})")

    variants = {b: cl.spaces[b, ""].pb for b, r in cl.spaces if r == ""} or batch_variants(problem, microbatch_sizes)
    for b, pb in variants.items():
        if left_s() <= 0:
            unsolved(pb.graph.batch_size)
            continue
        points.append(_prepare(pb, prec, [c for c in cl.plans if (c.problem or problem).graph.batch_size
                                          == pb.graph.batch_size], max_stages,
                               {r: x for (a, r), x in cl.spaces.items() if a == b}))
    held = None   # the point of the least objective of a checked plan (the incumbent), and its plans

    def above_s() -> float:   # a plan at least the top_k-th candidate's iteration cannot enter the top_k
        its = sorted(c.iteration_s for c in uniform + found)
        return its[top_k - 1] if len(its) >= top_k else math.inf

    # the starts, in increasing lower bound, while that lies below the least start the
    # checker accepts (the first cutoff): a size past it is pruned, its start not needed
    points.sort(key=lambda q: q.lb_s)
    for q in points:
        if q.lb_s >= incumbent or left_s() <= 0:
            break
        with_start(q)
        if q.start is not None and q.start[0] < incumbent:
            got = evaluate(q.pb, q.spaces, q.start[1], [q.t.configs[c] for c in q.start[2]], above_s())
            if got is not None:
                incumbent, held = q.start[0], (q, got)
    points.sort(key=lambda q: q.start[0] if q.start is not None else math.inf)
    for left, q in zip(range(len(points), 0, -1), points):
        b = q.pb.graph.batch_size
        if left_s() <= 0:
            unsolved(b)
            continue
        t1 = time.perf_counter()
        t = q.t
        row = {"microbatch_size": b, "max_stages": q.K, "configs": len(t.configs), "cutoff_s": incumbent,
               "start_s": q.start[0] if q.start is not None else None, "lb_s": q.lb_s}
        if q.lb_s >= incumbent and not (held is not None and held[0] is q):
            row.update(status="pruned by bound", bound_s=q.lb_s, seconds=time.perf_counter() - t1 + q.seconds)
            rows.append(row)
            say(f"stage space: microbatch size {b}, up to {q.K} stages: pruned, its bound {q.lb_s:.6g} s reaches "
                f"the incumbent {incumbent:.6g} s")
            continue
        mine = held is not None and held[0] is q   # this size holds the incumbent, its start
        t, start, known = narrowed(q, incumbent, held[1] if mine else None)
        row["configs_milp"] = len(t.configs)
        if mine and q.lb_s >= incumbent * (1 - rel_gap):
            # the start is within the gap of the size's own lower bound: proven, no MILP
            sol = StageSolution(tuple(start[1]), tuple(start[2]), start[0], q.lb_s, "start within the bound")
            got, refused, status, bound = held[1], 0, sol.status, q.lb_s
        else:
            milp = StageMilp(t, q.K, q.pb.n_devices)
            milp.stop = clock.stop   # Ctrl-C interrupts HiGHS and keeps the best plan so far
            row.update(runs=len(milp.runs), binaries=milp.n_binaries, rows=milp.n_rows)
            end = time.perf_counter() + min(MILP_LIMIT_S, left_s() / left)   # for all its re-solves
            sol, got, refused = solve_checked(q.pb, q.spaces, t, milp, lambda: min(end - time.perf_counter(),
                                                                                  left_s()),
                                              rel_gap, cutoff_s=incumbent, start=start, known=known, above_s=above_s)
            status = milp.status or f"not solved ({why()})"   # "": the budget left no time for a solve
            bound = milp.bound_s
            if milp.abandoned or status == "kTimeLimit" or status.startswith("not solved"):
                # left running (Ctrl-C or past its limit), stopped or never run: the bound is
                # at least the size's own lower bound
                bound = max(bound, q.lb_s)
            if mine and (sol is None or sol.objective_s > start[0]):
                # nothing found below this size's own start, the incumbent (kInfeasible, or a
                # worse solution of HiGHS's heuristics: proven within the bound)
                sol = StageSolution(tuple(start[1]), tuple(start[2]), start[0], bound, f"{status} below the start")
                got = held[1]
        row["refused"] = refused
        row["status"], row["bound_s"] = (sol.status, sol.bound_s) if sol is not None else (status, bound)
        if sol is not None:
            label = _label(t, sol.split, sol.configs)
            found += [StagePlan(p, it, sol.objective_s, f"stages: {label}", q.pb) for p, it in got]
            row.update(objective_s=sol.objective_s, pp=len(sol.configs), plan=label,
                       **row_iteration(got, len(reduction_options([t.configs[c] for c in sol.configs])),
                                       above_s()))
            incumbent = min(incumbent, sol.objective_s)
        row["seconds"] = time.perf_counter() - t1 + q.seconds
        rows.append(row)
        if status == "kInterrupt":
            cut.append(f"stage space: microbatch size {b}: the MILP was interrupted"
                       + (f", bound {row['bound_s']:.6g} s" if math.isfinite(row["bound_s"]) else ""))
        if status.startswith("not solved"):
            cut.append(f"stage space: microbatch size {b}: {status}")
        if status == "kTimeLimit":
            above = row.get("objective_s", row["cutoff_s"])
            cut.append(f"stage space: microbatch size {b}: the MILP stopped at its time limit"
                       + (f" ({why()})" if why().startswith("MILP budget") else "")
                       + f", bound {row['bound_s']:.6g} s against {above:.6g} s")
        if "plan" in row:
            what = f"{row['objective_s']:.6g} s, bound {row['bound_s']:.6g} s ({row['plan']})"
        elif status == "kInfeasible" and math.isfinite(row["cutoff_s"]):
            what = f"none below the incumbent {row['cutoff_s']:.6g} s (proven)"
        else:
            what = f"no plan ({status})"
        say(f"stage space: microbatch size {b}, up to {q.K} stages: {what} in {row['seconds']:.2f} s")
    rows.sort(key=lambda r: r["microbatch_size"])
    # the cluster space's plans all stay (so its best simulated plan is among those ranked,
    # and the stage space never does worse in the simulator), with the MILP's plans that
    # would enter its top K by the estimate beside them
    # (a MILP plan equal to one of them is that plan, simulated once, with its MILP objective)
    found.sort(key=lambda c: c.iteration_s)
    kth = uniform[top_k - 1].iteration_s if len(uniform) >= top_k else math.inf
    fresh = []
    for c in found[:top_k]:
        same = next((i for i, u in enumerate(uniform) if u.problem.graph.batch_size == c.problem.graph.batch_size
                     and u.plan == c.plan), None)
        if same is not None:
            uniform[same] = replace(uniform[same], model_s=c.model_s, label=f"{uniform[same].label} = {c.label}")
        elif c.iteration_s < kth:
            fresh.append(c)
    cands = sorted(uniform + fresh, key=lambda c: c.iteration_s)
    counts = {"points": cl.points, "visited": cl.solved, "pruned": cl.pruned, "infeasible": cl.infeasible,
              "precision": cl.precision}   # the cluster search's, as the report reads them
    return StageResult(cands, cl.plans[0].iteration_s, cl.bound_s, [counts, *rows], cut,
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
    res = plan_stages(problem, clock, top_k=options.top_k, microbatch_sizes=sizes, progress=say,
                      milp_share=options.stage_milp_share)
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
