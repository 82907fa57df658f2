"""The mixed-fleet space (model.fleet) behind ``model.solve``: each microbatch size of
the global batch searched in turn, the outcome as a ``SolveResult``.

Status: "optimal" when the best plan's analytic iteration is within ``rel_gap`` of the
fleet's ideal (a bound on every plan); "searched" when every point was visited;
"time_limit" / "interrupted" when the clock cut the search."""
from __future__ import annotations

from distplan.core.errors import DistplanError
from distplan.costs.problem import Problem
from distplan.model.cluster import batch_variants
from distplan.model.fleet import plan_fleet
from distplan.model.options import DEFAULT_MICROBATCH_SIZES, SolveOptions, SolveResult
from distplan.model.progress import Clock, Log

#: SolveResult.path_name of a fleet-space solve
FLEET_SPACE = "fleet"


def mixed_training(problem: Problem) -> bool:
    """Training on more than one device kind: what the fleet space is for."""
    return problem.training and len(set(problem.device_kind.tolist())) > 1


def solve_fleet(problem: Problem, options: SolveOptions, clock: Clock, say: Log) -> SolveResult:
    """Search the fleet space at every microbatch size within the clock; plans carry their
    analytic iteration (``predicted['model_iteration_s']``)."""
    if not problem.training:
        raise DistplanError("the fleet plan space plans training; use --space pipeline for inference")
    sizes = DEFAULT_MICROBATCH_SIZES if options.microbatch_sizes is None else options.microbatch_sizes
    variants = batch_variants(problem, sizes)
    results = []
    for key, pb in sorted(variants.items(), key=lambda kv: kv[0] != 0):
        if clock.expired():
            clock.cut_short.append(f"fleet space: microbatch size {pb.graph.batch_size} not searched (time)")
            continue
        say(f"fleet space: microbatch size {pb.graph.batch_size} x {pb.microbatches} microbatches")
        try:
            results.append((pb, plan_fleet(pb, top_k=options.top_k, progress=say, deadline=clock.deadline,
                                           stop=clock.stop, sensitivity_budget=options.sensitivity_budget)))
        except DistplanError as e:
            say(f"fleet space: microbatch size {pb.graph.batch_size}: {e}")
    if not results:
        raise DistplanError("no plan of the fleet space fits (every microbatch size tried); "
                            "try --space pipeline")
    chosen, res = min(results, key=lambda x: x[1].plans[0].iteration_s)
    bound = min(r.bound_s for _, r in results)
    best = res.plans[0]
    gap = (best.iteration_s - bound) / best.iteration_s if best.iteration_s > 0 else 0.0
    plans = [f.plan.with_predicted(milp_objective=f.iteration_s, model_iteration_s=f.iteration_s,
                                   model_bound_s=bound, cluster_point=f.point.label(chosen))
             for f in res.plans]
    for _, r in results:
        clock.cut_short.extend(r.cut_short)
    status = clock.why() if clock.cut_short else ("optimal" if gap <= options.rel_gap else "searched")
    explored = [{"points": sum(r.points for _, r in results), "visited": sum(r.solved for _, r in results),
                 "pruned": 0, "infeasible": sum(r.infeasible for _, r in results)}]
    return SolveResult(status=status, objective_s=best.iteration_s, bound_s=bound, gap=gap,
                       seconds=clock.elapsed_s(), build_seconds=0.0, n_binaries=0, n_constraints=0,
                       plans=plans, path_name=FLEET_SPACE, log=say.lines,
                       replicas=best.plan.stages[0].replicas, explored=explored, cut_short=list(clock.cut_short),
                       problem=chosen if chosen is not problem else None)
