"""Phase 3 of a solve: the MILP (model.build) of the promising layouts, solved by HiGHS.

Layouts go best heuristic first. Each is built with its proven bound as a cut, warm-started
from its best plan, and skipped entirely (status optimal, no HiGHS) when that plan is
already within the gap of the bound; a later layout is not solved when its bound cannot
beat the best plan found by more than the gap, or when no time is left (its bound
stands). The result's bound is the least over every layout explored of its proven bound.

The clock (time limit, Ctrl-C) holds for the model build too: a layout's HiGHS gets what
is left of its share after the build, and once the clock has expired the best layout
with a plan is not built at all (``LayoutSolve.model`` None: its plan and proven bound
stand, status time_limit / interrupted).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import pyomo.environ as pyo

from distplan.core.gap import within_gap
from distplan.costs.check import plan_violations
from distplan.costs.problem import Problem
from distplan.core.deadline import current_deadline
from distplan.core.errors import DistplanError, InternalError
from distplan.core.plan import Plan
from distplan.model.admission import PlanGate, layout_spec
from distplan.model.build import build_model
from distplan.model.extract import assign_plan, plan_from_values
from distplan.model.heuristic import score
from distplan.model.highs import HighsOutcome, HighsRun
from distplan.model.inputs import MIB
from distplan.model.options import SolveOptions
from distplan.model.phase_fast import Candidate
from distplan.model.progress import Clock, Log, fmt


@dataclass(frozen=True, eq=False)
class LayoutSolve:
    """The MILP of one layout after HiGHS: its best plan (the MILP's or, if better, the
    warm start, which model.admission let in) with score ``objective_s``, HiGHS's status and bound (at least the
    candidate's), HiGHS's own objective, and the model and HiGHS instance (the top-K
    phase goes on with them)."""

    candidate: Candidate
    model: pyo.ConcreteModel | None   # None: not built (no time left)
    run: HighsRun | None
    status: str
    bound_s: float
    best: Plan | None
    best_from_milp: bool      # best is HiGHS's solution (else the warm start, or None)
    objective_s: float
    solver_objective_s: float
    build_s: float
    solver_bound_s: float = math.nan   # HiGHS's own dual bound (model objective, seconds)


@dataclass(frozen=True)
class RBound:
    """What is proven for one layout (replication factor ``r``, layout ``name``): its
    bound and the status behind it."""

    r: int
    bound_s: float
    status: str
    name: str = ""


@dataclass(frozen=True, eq=False)
class MilpPhase:
    """The layouts solved (in solve order), one RBound per layout explored, the winner
    (best objective, then fewer replicas), and over every layout the bound (capped by
    the winner's objective) and status (the first that is not optimal)."""

    solves: tuple[LayoutSolve, ...]
    bounds: tuple[RBound, ...]
    winner: LayoutSolve
    bound_s: float
    status: str

    def solve_of(self, r: int, name: str | None = None) -> LayoutSolve | None:
        return next((s for s in self.solves if s.candidate.r == r and name in (None, s.candidate.name)), None)


def unsolved_layout(options: SolveOptions, c: Candidate, status: str, say: Log) -> LayoutSolve:
    """A layout whose MILP is not built (the clock expired): its best plan and bound
    (status optimal when that plan is within the gap of the bound, as solve_layout)."""
    best, hs, lb = c.best, c.score, c.bound_s
    if options.objective == "throughput" and within_gap(hs, lb, options.rel_gap):
        status = "optimal"
    say(f"r={c.r} {c.name}: not solved ({status}); objective {fmt(c.score)} bound {fmt(c.bound_s)}")
    return LayoutSolve(c, None, None, status, min(c.bound_s, c.score), best[0] if best else None, False, c.score,
                       math.inf, 0.0)


def solve_layout(problem: Problem, options: SolveOptions, c: Candidate, deadline: float, clock: Clock,
                 say: Log) -> LayoutSolve:
    """Build the MILP of one layout (with its bound as a cut), warm-start it with c's best
    plan and run HiGHS until ``deadline`` (perf_counter seconds, the build included; at
    least 0.1 s of HiGHS when there is no plan to fall back on)."""
    weight = options.sensitivity_weight
    tb = time.perf_counter()
    m = build_model(problem, layout_spec(options, c.lanes, c.bound_s))
    run = HighsRun(m, threads=options.threads, seed=options.seed, verbose=options.verbose,
                   progress=options.progress, stop=clock.stop)
    build_s = time.perf_counter() - tb
    say(f"model {c.name} (r={c.r}): {run.n_binaries} binaries, {run.n_constraints} constraints, "
        f"built in {build_s:.1f}s")
    run.h.setOptionValue("mip_improving_solution_save", True)
    lb, heur = c.bound_s, c.best
    if heur is not None:
        assign_plan(m, problem, heur[0])
        run.set_start()
    hs = heur[1] if heur is not None else math.inf
    hooked = options.extra_constraints is not None   # the user's rows may charge the start more than hs
    if options.objective == "throughput" and not hooked and within_gap(hs, lb, options.rel_gap):
        # the warm start is already within the gap of a proven bound: nothing for HiGHS to do
        out = HighsOutcome("optimal", hs, lb, 0.0, None)
        say(f"warm start {fmt(hs)} is within {options.rel_gap:.1%} of the proven bound {fmt(lb)}; HiGHS skipped")
    elif heur is not None and (clock.expired() or time.perf_counter() >= deadline):
        out = HighsOutcome(clock.why(), hs, lb, 0.0, None)
        say(f"no time left for HiGHS after the build; the warm start {fmt(hs)} stands")
    else:
        out = run.run(deadline - time.perf_counter(), options.rel_gap)
    status, bound = out.status, out.bound_s
    if options.objective == "throughput" and (not math.isfinite(bound) or bound < lb):
        bound = lb   # T >= lb is a valid cut, and the objective is >= T
    best, from_milp = None, False
    if out.values is not None:
        best, from_milp = plan_from_values(m, problem, run.value_fn(out.values)), True
    if heur is not None and (best is None or score(problem, heur[0], options.objective, weight)
                             < score(problem, best, options.objective, weight) - 1e-15):
        best, from_milp = heur[0], False
    obj = score(problem, best, options.objective, weight) if best is not None else math.inf
    if status == "optimal" and bound > obj:
        bound = obj
    if status == "infeasible" and best is None:
        bound = math.inf
    say(f"r={c.r} {c.name}: objective {fmt(obj)} bound {fmt(bound)} status {status} ({out.seconds:.1f}s)")
    return LayoutSolve(c, m, run, status, bound, best, from_milp, obj, out.objective_s, build_s, out.bound_s)


def viable(problem: Problem, candidates: tuple[Candidate, ...]) -> list[Candidate]:
    """The candidates some plan fits, best heuristic first; DistplanError if none."""
    order = sorted(candidates, key=lambda c: (c.score, -c.bound_s, c.r))
    if all(math.isinf(c.bound_s) for c in order):
        raise DistplanError(f"no plan fits the devices' memory on path {order[0].name} even with every op at its "
                            "smallest precision; allow lower precisions, fewer in-flight microbatches or more devices")
    return [c for c in order if not math.isinf(c.bound_s)]


def _no_plan(problem: Problem, options: SolveOptions, c: Candidate, status: str) -> DistplanError:
    """The error when no layout's MILP found a plan."""
    if status == "infeasible":
        cap = sum(problem.device_mem_bytes[d] for d in c.lanes[0])
        need = math.fsum(problem.static_bytes[v].min() for v in range(problem.n_ops))
        budget = options.sensitivity_budget
        return DistplanError(
            f"no plan satisfies the constraints on path {c.name}: memory (parameters need at least "
            f"{need / MIB:.2f} MiB against {cap / MIB:.2f} MiB on {len(c.lanes[0])} devices)"
            + (f" and the sensitivity budget {budget:.6g}" if budget is not None else "")
            + (" and the extra_constraints" if options.extra_constraints is not None else "")
            + "; allow lower precisions, more stages or a larger budget")
    return DistplanError(f"no plan found in the {options.time_limit_s:.3g} s the solve had "
                         f"(HiGHS status {status}); raise the time limit")


#: seconds to build one layout's MILP and hand it to HiGHS per (op + tensor x stage) x
#: stage x precision (the edge-order and crossing constraints grow with tensors x stages),
#: measured on this project's 2-core machine: bert-base on mcm4x4 (146 ops, 181 tensors,
#: 16 stages, 2 precisions) 0.8 s; a dense 150-op coarsening of 20,000 ops and 200,000
#: tensors (677,915 constraints) 118 s, the forecast 3-4x lower
BUILD_S_PER_CELL = 1e-5
#: the first layout is built unless its forecast overruns the time left by more than this
#: (a plan late by a second beats none; one late by a minute does not)
BUILD_SLACK_S = 2.0


def build_s(problem: Problem, c: Candidate) -> float:
    """A forecast of ``solve_layout``'s build for candidate ``c``."""
    k = len(c.lanes[0])
    return BUILD_S_PER_CELL * (problem.n_ops + len(problem.edges) * k) * k * len(problem.precisions)


def milp_phase(problem: Problem, options: SolveOptions, gate: PlanGate, candidates: tuple[Candidate, ...],
               clock: Clock, say: Log) -> MilpPhase:
    """Phase 3 (module docstring)."""
    order = viable(problem, candidates)
    share = 1.0 if options.top_k == 1 else 0.8
    solves: list[LayoutSolve] = []
    bounds: dict[tuple[int, str], RBound] = {}
    best_obj = min(c.score for c in order)
    unsolved = []

    def settled(c: Candidate) -> bool:   # c's proven bound is within the gap of the best plan
        return within_gap(best_obj, c.bound_s, options.rel_gap)
    others = [c for c in order[1:] if not settled(c)]
    for i, c in enumerate(order):
        if i > 0 and settled(c):
            bounds[c.r, c.name] = RBound(c.r, c.bound_s, "optimal", c.name)
            say(f"r={c.r} {c.name}: its bound {fmt(c.bound_s)} cannot beat the best {fmt(best_obj)} by more than "
                f"{options.rel_gap:.1%}; not solved")
            continue
        n_left, left = len(order) - i, clock.left_s() * share
        build_est = max((x.build_s for x in solves), default=0.0)   # a build takes about as long as the last ones
        # the first layout gets most of the time; a later one its share, but at least a build and a second
        t_i = max(left / n_left, min(left, build_est + 1.0)) if i > 0 else left * (0.6 if others else 1.0)
        if i > 0 and (clock.expired() or left < 1.0 + build_est):
            bounds[c.r, c.name] = RBound(c.r, c.bound_s, clock.why(), c.name)
            say(f"r={c.r} {c.name}: no time left to solve; its proven bound {fmt(c.bound_s)} stands")
            unsolved.append(c.name)
            continue
        if i == 0 and c.best is None and build_s(problem, c) > clock.left_s() + BUILD_SLACK_S:
            run = current_deadline()   # the command line's limit, from the process's start
            raise DistplanError(
                f"no plan found: the heuristics found none that fits on layout {c.name}, and its MILP "
                f"({problem.n_ops:,} ops, {len(problem.edges):,} tensors, {len(c.lanes[0])} stages) takes about "
                f"{build_s(problem, c):.0f} s to build, more than the {max(clock.left_s(), 0.0):.1f} s left of the "
                f"time limit of {(run.limit_s if run else clock.limit_s):g} s; raise the time limit, or give devices "
                "with more memory or fewer microbatches in flight")
        if i == 0 and c.best is not None and (clock.expired() or build_s(problem, c) > clock.left_s() + BUILD_SLACK_S):
            if not clock.expired():
                say(f"r={c.r} {c.name}: its MILP would take about {build_s(problem, c):.0f} s to build, more than "
                    f"the {clock.left_s():.1f} s left; the heuristic's plan stands")
            s = unsolved_layout(options, c, clock.why(), say)
            if s.status != "optimal":
                unsolved.append(c.name)
        else:
            s = solve_layout(problem, options, c, time.perf_counter() + max(t_i, 0.1), clock, say)
            if s.best is not None:
                clock.stop.arm()
        solves.append(s)
        bounds[c.r, c.name] = RBound(c.r, s.bound_s, s.status, c.name)
        best_obj = min(best_obj, s.objective_s)
    for c in candidates:
        if (c.r, c.name) not in bounds:
            bounds[c.r, c.name] = RBound(c.r, c.bound_s, "infeasible" if math.isinf(c.bound_s) else "optimal",
                                         c.name)
    if unsolved:
        clock.cut(f"MILP phase: {len(unsolved)} of {len(order)} layouts not solved "
                  f"({', '.join(unsolved[:3])}{', ...' if len(unsolved) > 3 else ''}); their proven bounds stand", say)
    found = [s for s in solves if s.best is not None]
    if not found:
        first = next((s for s in solves if s.candidate.r == order[0].r), None)
        raise _no_plan(problem, options, order[0], first.status if first else "time_limit")
    win = min(found, key=lambda s: (s.objective_s, s.candidate.r))
    bad = plan_violations(problem, win.best)
    if bad:  # never trust a solver alone
        raise InternalError("the MILP returned an infeasible plan: " + "; ".join(bad))
    if win.best_from_milp and gate.contradicts(win.candidate.lanes, win.best):
        raise InternalError("the MILP returned a plan that breaks the extra_constraints it was solved under")
    bound = min(b.bound_s for b in bounds.values())
    status = next((b.status for b in bounds.values() if math.isfinite(b.bound_s) and b.status != "optimal"), "optimal")
    bound = min(bound, win.objective_s)
    say(f"best: r={win.candidate.r} {win.candidate.name}, objective {fmt(win.objective_s)}, bound over {len(bounds)} layouts "
        f"(r in {sorted({r for r, _ in bounds})}) {fmt(bound)}, status {status}")
    return MilpPhase(tuple(solves), tuple(bounds.values()), win, bound, status)
