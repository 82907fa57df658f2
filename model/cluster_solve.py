"""The cluster plan space (model.cluster) behind ``model.solve``: which space a problem
gets (``space_name``; ``model.spaces.resolve_space`` turns it into the space object) and
the cluster search's outcome as a ``core.space.SearchResult``.

Status: "optimal" when the gap between the best plan's analytic iteration and the
bound over the whole declared space is within ``rel_gap``; "searched" when every point
was visited or pruned but the bound (which leaves out what no split-independent bound
captures: the exposed gradient reduction past the first bucket, stage-boundary
transfers) stays further below; "time_limit" / "interrupted" when the clock cut the
search (the bound then covers the points not visited by their first bound).
"""
from __future__ import annotations

from distplan.core.clock import Clock
from distplan.core.errors import DistplanError
from distplan.core.space import BoundKind, SearchResult, Status
from distplan.costs.problem import Problem
from distplan.model.cluster import plan_cluster, training_precision
from distplan.model.options import DEFAULT_MICROBATCH_SIZES, LAYOUT_NAMES, SolveOptions
from distplan.model.progress import Log

#: SolveResult.path_name of a cluster-space solve
CLUSTER_SPACE = LAYOUT_NAMES["cluster"]
#: device kinds the cluster space is meant for (one kind, GPU-class nodes)
GPU_KINDS = ("a100", "h100", "v100", "t4")


def space_name(problem: Problem, options: SolveOptions) -> str:
    """"pipeline", "cluster" or "fleet" for ``options.space`` ("auto": cluster for training
    with the throughput objective, or inference with the latency objective, on one kind of
    GPU; fleet for training with the throughput objective on several kinds; else pipeline)."""
    if problem.exposed:   # costs.exposed is modelled in the pipeline space only
        if options.space in ("cluster", "fleet") or options.objective == "sensitivity":
            raise DistplanError("exposed communication (comm 'exposed') is modelled in the pipeline plan space; "
                                "use --space pipeline with the throughput or latency objective")
        return "pipeline"
    cluster_objective = "throughput" if problem.training else "latency"
    kinds = {problem.topology.kind_of(d).name for d in range(problem.n_devices)}
    if options.space == "fleet" or options.objective == "sensitivity" or (
            options.space == "auto" and problem.training and len(kinds) > 1
            and options.objective == "throughput" and options.extra_constraints is None
                                    and options.n_stages is None and options.path is None
                                    and options.replicas is None):
        if not problem.training or options.objective not in ("throughput", "sensitivity"):
            raise DistplanError("the fleet plan space plans training (--objective throughput or sensitivity); "
                                "use a training workload, or --space pipeline")
        return "fleet"
    if options.space != "auto":
        if options.space == "stage" and (not problem.training or options.objective != "throughput"):
            raise DistplanError("the stage plan space plans training steps; use --objective throughput with a "
                                "training workload, or --space cluster")
        if options.space in ("cluster", "stage"):
            if options.objective != cluster_objective:
                raise DistplanError("the cluster plan space minimises the iteration time in training and the "
                                    "latency in inference; use --objective "
                                    f"{cluster_objective} for {'training' if problem.training else 'inference'}")
            if len(set(problem.device_kind.tolist())) != 1:
                raise DistplanError(f"the {options.space} plan space needs one device kind; mixed fleets use the "
                                    "pipeline or fleet space")
            if problem.training:
                training_precision(problem)
        return options.space
    if (options.objective != cluster_objective or len(kinds) != 1
            or not kinds <= set(GPU_KINDS) or options.sensitivity_budget is not None
            or options.extra_constraints is not None or options.n_stages is not None or options.path is not None
            or options.replicas is not None):
        return "pipeline"
    if problem.training:
        try:
            training_precision(problem)
        except DistplanError:
            return "pipeline"
    return "cluster"


def search_cluster(problem: Problem, options: SolveOptions, clock: Clock) -> SearchResult:
    """Search the cluster space within the clock; plans carry their analytic iteration
    (``predicted['milp_objective']`` and ``['model_iteration_s']``); no solver report (no MILP)."""
    say = Log(options.progress)
    sizes = DEFAULT_MICROBATCH_SIZES if options.microbatch_sizes is None else options.microbatch_sizes
    res = plan_cluster(problem, top_k=options.top_k, progress=say, clock=clock,
                       microbatch_sizes=sizes if problem.training else (),
                       virtual_stages=options.virtual_stages if problem.training else (),
                       context_parallel=options.context_parallel, expert_parallel=options.expert_parallel,
                       tp_comm_overlap=options.tp_comm_overlap, fallback_timer=options.fallback_timer,
                       ep_dispatcher=options.ep_dispatcher)
    best = res.plans[0]
    chosen = best.problem if best.problem is not None else problem
    # the report covers one problem: the winner's microbatch size
    same = [c for c in res.plans if (c.problem if c.problem is not None else problem) is chosen]
    plans = [c.plan.with_predicted(milp_objective=c.iteration_s, model_iteration_s=c.iteration_s,
                                   model_bound_s=c.bound_s, cluster_point=c.point.label(),
                                   **({"model_simulated": True} if c.simulated else {}),
                                   **({"context_parallel": c.point.cp} if c.point.cp > 1 else {}))
             for c in same]
    if res.cut_short:
        status = Status(clock.why())
    else:
        status = Status.OPTIMAL if res.gap <= options.rel_gap else Status.SEARCHED
    for what in res.cut_short:
        clock.cut_short.append(what)
    explored = ({"points": res.points, "visited": res.solved, "pruned": res.pruned,
                 "infeasible": res.infeasible, "precision": res.precision},)
    return SearchResult("cluster", status, tuple(plans), best.iteration_s, res.bound_s, BoundKind.ANALYTIC,
                        analytic=True, cut_short=tuple(clock.cut_short), seconds=clock.elapsed_s(),
                        problem=chosen if chosen is not problem else None, replicas=best.point.dp,
                        explored=explored, log=tuple(say.lines))
