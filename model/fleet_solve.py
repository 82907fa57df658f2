"""The mixed-fleet space (model.fleet) behind ``model.solve``: each microbatch size of
the global batch searched in turn, the outcome as a ``core.space.SearchResult``.

Status: "optimal" when the best plan's analytic iteration is within ``rel_gap`` of the
fleet's ideal (a bound on every plan); "searched" when every point was visited;
"time_limit" / "interrupted" when the clock cut the search."""
from __future__ import annotations

import dataclasses

from distplan.core.clock import Clock
from distplan.core.errors import DistplanError
from distplan.core.space import BoundKind, SearchResult, Status
from distplan.costs.problem import Problem
from distplan.model.cluster import batch_variants
from distplan.model.fleet import idle_kind_error, plan_fleet
from distplan.model.options import DEFAULT_MICROBATCH_SIZES, LAYOUT_NAMES, SolveOptions
from distplan.model.progress import Log

#: SolveResult.path_name of a fleet-space solve
FLEET_SPACE = LAYOUT_NAMES["fleet"]


def mixed_training(problem: Problem) -> bool:
    """Training on more than one device kind: what the fleet space is for."""
    return problem.training and len(set(problem.device_kind.tolist())) > 1


def iteration_target_s(target: float | str | None, fastest_s: float) -> float:
    """An iteration target in seconds: a number of seconds, or a share over the fastest
    plan ("5%"); None: the fastest itself."""
    if target is None:
        return fastest_s
    t = str(target).strip()
    try:
        value = fastest_s * (1 + float(t[:-1]) / 100) if t.endswith("%") else float(t)
    except ValueError:
        raise DistplanError(f"iteration target must be seconds or a percentage like 5%, got {target!r}") from None
    if not value > 0:
        raise DistplanError(f"iteration target must be > 0, got {target!r}")
    return value


def _least_sensitivity(results, options: SolveOptions, say: Log):
    """Per microbatch size, the plans meeting the iteration target, least sensitivity
    first (ties: faster first), keeping only the least sensitivity (the ranking then
    orders those by simulated iteration)."""
    fastest = min(r.plans[0].iteration_s for _, r in results)
    target = iteration_target_s(options.iteration_target, fastest)
    say(f"fleet space: least sensitivity with an iteration <= {target:.6g} s (fastest plan {fastest:.6g} s)")
    out = []
    for pb, r in results:
        ok = sorted((f for f in r.plans if f.iteration_s <= target * (1 + 1e-9)),
                    key=lambda f: (f.sensitivity, f.iteration_s))
        if ok:
            least = ok[0].sensitivity
            r.plans = [f for f in ok if f.sensitivity <= least * (1 + 1e-12) + 1e-12][:options.top_k]
            out.append((pb, r))
    if not out:
        raise DistplanError(f"no plan of the fleet space meets the iteration target {target:.6g} s "
                            f"(the fastest takes {fastest:.6g} s)")
    return out


def search_fleet(problem: Problem, options: SolveOptions, clock: Clock, per_op: bool = True) -> SearchResult:
    """Search the fleet space at every microbatch size within the clock; plans carry their
    analytic iteration (``predicted['model_iteration_s']``); the bound is the fleet's
    ideal; no solver report (HiGHS only chooses per-op precisions; ``per_op`` False: the
    three policies alone, ``model.fleet.plan_fleet``)."""
    say = Log(options.progress)
    if not problem.training:
        raise DistplanError("the fleet plan space plans training; use --space pipeline for inference")
    if options.virtual_stages:
        raise DistplanError("--virtual-stages does not apply to the fleet space (1F1B on each kind's stages); "
                            "leave it out")
    sizes = DEFAULT_MICROBATCH_SIZES if options.microbatch_sizes is None else options.microbatch_sizes
    variants = batch_variants(problem, sizes)
    least_sens = options.objective == "sensitivity"
    idle = idle_kind_error(problem)
    if idle:
        raise DistplanError(idle)
    results = []
    for key, pb in sorted(variants.items(), key=lambda kv: kv[0] != 0):
        if clock.expired():
            clock.cut_short.append(f"fleet space: microbatch size {pb.graph.batch_size} not searched "
                                   f"({'interrupted' if clock.stop.requested else 'time'})")
            continue
        say(f"fleet space: microbatch size {pb.graph.batch_size} x {pb.microbatches} microbatches")
        try:
            results.append((pb, plan_fleet(pb, top_k=10**9 if least_sens else options.top_k, progress=say,
                                           clock=clock,
                                           sensitivity_budget=options.sensitivity_budget, per_op=per_op)))
        except DistplanError as e:
            say(f"fleet space: microbatch size {pb.graph.batch_size}: {e}")
    if not results:
        raise DistplanError("no plan of the fleet space fits (every microbatch size tried); "
                            "try --space pipeline")
    if least_sens:
        results = _least_sensitivity(results, options, say)
    chosen, res = min(results, key=lambda x: (x[1].plans[0].sensitivity, x[1].plans[0].iteration_s)
                      if least_sens else x[1].plans[0].iteration_s)
    bound = min(r.bound_s for _, r in results)
    best = res.plans[0]
    plans = [f.plan.with_predicted(milp_objective=f.iteration_s, model_iteration_s=f.iteration_s,
                                   sensitivity=f.sensitivity,
                                   model_bound_s=bound, cluster_point=f.point.label(chosen))
             for f in res.plans]
    for _, r in results:
        clock.cut_short.extend(r.cut_short)
    status = Status(clock.why()) if clock.cut_short else None
    explored = ({"points": sum(r.points for _, r in results), "visited": sum(r.solved for _, r in results),
                 "pruned": 0, "infeasible": sum(r.infeasible for _, r in results)},)
    out = SearchResult("fleet", Status.SEARCHED, tuple(plans), best.iteration_s, bound, BoundKind.IDEAL,
                       analytic=True, cut_short=tuple(clock.cut_short), seconds=clock.elapsed_s(),
                       problem=chosen if chosen is not problem else None, replicas=best.plan.stages[0].replicas,
                       explored=explored, log=tuple(say.lines))
    if status is None:
        status = Status.OPTIMAL if out.gap <= options.rel_gap else Status.SEARCHED
    return dataclasses.replace(out, status=status)
