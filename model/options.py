"""What a caller asks of the planner (SolveOptions) and what it gets back (SolveResult)."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from distplan.core.errors import DistplanError
from distplan.core.validate import (check_bool, check_callable, check_choice, check_float, check_int, check_ints,
                                    check_str)
from distplan.core.plan import Plan
from distplan.core.space import BoundKind, SearchResult
from distplan.costs.expert_parallel import DISPATCHERS

OBJECTIVES = ("throughput", "latency", "sensitivity")
#: plan spaces: "pipeline" (the MILP: stages along device paths, per-op precision,
#: replicated lanes), "cluster" (model.cluster: Megatron-style dp x tp x pp training
#: plans), "fleet" (model.fleet: mixed-fleet training, replica groups with their own
#: shares and precisions), "auto" (cluster for training on one kind of GPU, fleet for
#: training on several, else pipeline), "stage" (model.stage_space: the cluster space plus
#: heterogeneous stages from the stage MILP; asked for by name only)
SPACES = ("auto", "pipeline", "cluster", "fleet", "stage")
#: microbatch sizes the cluster space tries by default (those dividing the global batch)
DEFAULT_MICROBATCH_SIZES = (1, 2, 4, 8)


@dataclass(frozen=True)
class SolveOptions:
    """Solver settings: what to optimise, how long, and which plan space.

    Every field is checked in ``__post_init__`` (one DistplanError naming it); each
    field's meaning is in its own docstring below. The plan spaces are described in
    docs/concepts/plan-space.md, the MILP in docs/concepts/milp.md.
    """

    objective: str = "throughput"
    """"throughput" minimises the pipeline period, "latency" one microbatch's end-to-end
    latency (costs.evaluate.plan_latency_s), "sensitivity" (training on a mixed fleet, the
    fleet space) the summed sensitivity among the plans whose iteration meets
    ``iteration_target``."""
    sensitivity_budget: float | None = None
    """Caps the summed numerical sensitivity; None: no budget."""
    sensitivity_weight: float = 0.0
    """Adds weight x sensitivity (seconds per unit) to the objective."""
    iteration_target: float | str | None = None
    """Seconds, or a share over the fastest plan found ("5%"; default "0%": as fast as the
    fastest, no kind straggling); read by the "sensitivity" objective."""
    top_k: int = 5
    """Plans to return."""
    time_limit_s: float = 60.0   # the whole solve, every phase (model.planner)
    """The whole solve, every phase, on one clock."""
    rel_gap: float = 0.01
    """The relative gap target: a solve within it counts as optimal."""
    threads: int = 2
    """HiGHS threads."""
    seed: int = 0
    """HiGHS's random seed."""
    n_stages: int | None = None
    """Pipeline positions (default: every device)."""
    path: str | None = None
    """Force one device path family by name (model.paths; replicated layouts are named
    "<family>/<r>x<K>"); default: try them all and keep the best."""
    replicas: int | None = None
    """Force the replication factor r (lanes, model.lanes); default: every divisor of the
    device count for inference streams under the throughput objective, 1 otherwise."""
    verbose: bool = False
    """Show HiGHS's own log."""
    progress: Callable[[str], None] | None = field(default=None, compare=False)
    """Called with one human-readable line per event of a long solve."""
    fallback_timer: Callable[..., float | None] | None = field(default=None, compare=False)
    """``f(problem, plan, deadline_s)``: a training plan's iteration in seconds where the
    analytic iteration refuses it, or None where it cannot be had by the deadline (a
    perf_counter instant); the cluster space times its refused expert-parallel options so.
    ``distplan.solve`` sets the simulator's (``api.pipeline.simulated_iteration_s``) when
    None; ``model.solve`` alone leaves those options untimed (their bound stands)."""
    coarsen_ops: int | None = None
    """Read by ``distplan.solve``, not by ``model.solve``: solve on the graph coarsened to
    this many operators and expand the plans back; None: 150 when the graph has more than
    300 operators, 0: never."""
    extra_constraints: Callable[..., None] | None = field(default=None, compare=False)
    """User constraints ``f(m, problem, spec)`` (PyPSA's ``extra_functionality``), called
    on every Pyomo model built after distplan's own families
    (model.build.add_extra_constraints): ``m`` the model (m.y, m.prec, m.z, m.T, ...),
    ``spec`` its model.build.ModelSpec. It may only restrict. The heuristic, DP and budget
    phases ignore it, so the bound reported is in effect the MILP's own, and their plans
    are used only where they satisfy the MILP (model.admission)."""
    space: str = "auto"
    """Which plan space to search (``SPACES``)."""
    microbatch_sizes: tuple[int, ...] | None = None
    """Cluster space, training: samples per microbatch to search at the problem's global
    batch, besides the problem's own; None: ``DEFAULT_MICROBATCH_SIZES``; (): the
    problem's alone."""
    stage_milp_share: float | None = None
    """Stage space: the phase after its cluster search (the stage MILPs) gets at most this
    share of the cluster search's own wall seconds, the sizes it leaves unproven listed in
    ``cut_short`` (the plan never worse than the cluster space's); None: each MILP up to
    20 s within the time limit."""
    virtual_stages: tuple[int, ...] = ()
    """Cluster space, training: also search Megatron's interleaved 1F1B with these virtual
    stages per pipeline rank (each >= 2; where pp x vp divides the layers and pp the
    microbatches a replica runs). Off by default: an interleaved plan's analytic iteration
    replays its order, so a time-limited search visits far fewer points."""
    context_parallel: tuple[int, ...] | None = None
    """Cluster space, training on a zoo transformer: context-parallel degrees to search
    besides 1 (each dividing the sequence); None: 2, 4 and 8 when the sequence has at least
    8,192 tokens (``model.cluster_ranks``), else none; (): cp 1 only."""
    expert_parallel: tuple[int, ...] | None = None
    """Cluster space, training on a zoo mixture-of-experts model: expert-parallel degrees
    to search besides 1 (each dividing the routed experts, and dp at each point); None:
    every divisor of the experts; (): ep 1 only."""
    ep_dispatcher: str = "alltoall"
    """Cluster space, training on a zoo mixture-of-experts model: how its ep points move
    tokens (``costs.expert_parallel.DISPATCHERS``): Megatron's alltoall (a row per routed
    expert) or DeepEP's (a row per destination rank, across nodes once a node), balanced
    routing. A property of the system planned for, not searched."""
    tp_comm_overlap: bool = False
    """Cluster space, training: also search every sequence-parallel point with its
    tensor-parallel collectives pipelined with their GEMMs (``Stage.tp_comm_overlap``,
    ``costs.tp_overlap``, Megatron's --tp-comm-overlap). Off by default: it doubles those
    points, and on small layers the split ring's second latency makes it slower."""

    def __post_init__(self) -> None:
        """Every field checked by core.validate (one DistplanError naming the field);
        numbers are stored as Python floats and ints, microbatch sizes as a tuple."""
        name = "SolveOptions."
        fix = {
            "objective": check_choice(name + "objective", self.objective, OBJECTIVES),
            "space": check_choice(name + "space", self.space, SPACES),
            "sensitivity_budget": check_float(name + "sensitivity_budget", self.sensitivity_budget, 0.0,
                                              optional=True, none_means="no budget"),
            "sensitivity_weight": check_float(name + "sensitivity_weight", self.sensitivity_weight, 0.0),
            "iteration_target": _iteration_target(self.iteration_target),
            "top_k": check_int(name + "top_k", self.top_k),
            "time_limit_s": check_float(name + "time_limit_s", self.time_limit_s, 0.0, above=True),
            "rel_gap": check_float(name + "rel_gap", self.rel_gap, 0.0, below=1.0),
            "threads": _threads(self.threads),
            "seed": check_seed(name + "seed", self.seed),
            "n_stages": check_int(name + "n_stages", self.n_stages, optional=True),
            "path": check_str(name + "path", self.path, optional=True),
            "replicas": check_int(name + "replicas", self.replicas, optional=True),
            "verbose": check_bool(name + "verbose", self.verbose),
            "progress": check_callable(name + "progress", self.progress, "a function of one line of text"),
            "fallback_timer": check_callable(name + "fallback_timer", self.fallback_timer,
                                             "a function f(problem, plan, deadline_s) -> seconds or None"),
            "coarsen_ops": check_int(name + "coarsen_ops", self.coarsen_ops, 0, optional=True),
            "extra_constraints": check_callable(name + "extra_constraints", self.extra_constraints,
                                                "a function f(m, problem, spec) adding constraints"),
            "microbatch_sizes": check_ints(name + "microbatch_sizes", self.microbatch_sizes, optional=True),
            "virtual_stages": check_ints(name + "virtual_stages", self.virtual_stages, 2),
            "context_parallel": check_ints(name + "context_parallel", self.context_parallel, optional=True),
            "expert_parallel": check_ints(name + "expert_parallel", self.expert_parallel, optional=True),
            "tp_comm_overlap": check_bool(name + "tp_comm_overlap", self.tp_comm_overlap),
            "ep_dispatcher": check_choice(name + "ep_dispatcher", self.ep_dispatcher, DISPATCHERS),
        }
        for k, v in fix.items():
            object.__setattr__(self, k, v)


#: the most solver threads asked for: HiGHS starts one thread each (32,768 aborted the
#: process after 99 s, 'terminate called without an active exception'; 4,096 ran a 3 s
#: limit for 14 s on 2 cores)
MAX_THREADS = 1024


#: seeds run from 0 to HiGHS's largest (an int32): HiGHS refused -1 or 2**31 without a
#: word and kept its previous seed, numpy's generators raised ValueError on -1
MAX_SEED = 2**31 - 1


def check_seed(name: str, value: object) -> int:
    """A random seed: a whole number from 0 to ``MAX_SEED``."""
    n = check_int(name, value, 0)
    if n > MAX_SEED:
        raise DistplanError(f"{name} must be at most {MAX_SEED:,} (2**31 - 1, the solver's largest seed), got {n:,}")
    return n


def _threads(value: object) -> int:
    """SolveOptions.threads: a whole number from 1 to ``MAX_THREADS``."""
    n = check_int("SolveOptions.threads", value)
    if n > MAX_THREADS:
        raise DistplanError(f"SolveOptions.threads must be at most {MAX_THREADS:,} (HiGHS starts one thread each), "
                            f"got {n:,}")
    return n


def _iteration_target(value: float | str | None) -> float | str | None:
    """SolveOptions.iteration_target: seconds (> 0), a share such as "5%" (>= 0), or None."""
    name = "SolveOptions.iteration_target"
    if isinstance(value, str):
        t = value.strip()
        try:
            x = float(t[:-1] if t.endswith("%") else t)
        except ValueError:
            x = math.nan
        if not (math.isfinite(x) and (x >= 0 if t.endswith("%") else x > 0)):
            raise DistplanError(f"{name} must be seconds (> 0) or a share over the fastest plan such as '5%', "
                                f"got {value!r}")
        return value
    return check_float(name, value, 0.0, above=True, optional=True, none_means="as fast as the fastest plan")


@dataclass
class SolveResult:
    """Outcome of :func:`model.solve`: the ranked plans, the proven bound and the status.

    ``bound_s`` is valid over every lane layout of every replication factor explored (the
    least of their proven bounds; with ``extra_constraints``: for the constrained plans
    too). Each field's meaning is in its own docstring below.

    A view of the space's ``core.space.SearchResult`` (``search``, built by :meth:`of`;
    kept for the public API): the solver figures (``build_seconds``, ``n_binaries``,
    ``n_constraints``) read 0 where no MILP ran (``search.solver`` None), ``path_name``
    then names the space's layout ("megatron", "fleet").
    """

    status: str
    """"optimal" (the gap target is proven), "time_limit" (the clock ran out first; see
    ``cut_short``), "interrupted" (Ctrl-C: the best plan so far with its proven bound), or
    HiGHS's own status."""
    objective_s: float
    """The MILP objective of the best plan (period or latency, plus weight x sensitivity
    when weighted)."""
    bound_s: float
    """HiGHS's proven lower bound on ``objective_s``."""
    gap: float
    """(objective - bound) / objective."""
    seconds: float
    build_seconds: float
    n_binaries: int
    n_constraints: int
    plans: list[Plan]
    """Best first, each with ``predicted['milp_period_s']`` (and ``milp_latency_s``,
    ``sensitivity``)."""
    path_name: str
    """The winning layout's name."""
    path: tuple[int, ...] = ()
    """The winning layout's lane 0."""
    log: list[str] = field(default_factory=list)
    replicas: int = 1
    """The winning layout's replication factor."""
    lanes: tuple[tuple[int, ...], ...] = ()
    """The winning layout's lanes."""
    explored: list[dict] = field(default_factory=list)
    """One row per layout (model.planner.Explored as a dict: replicas, layout,
    heuristic_s, bound_s, status, solved, objective_s)."""
    cut_short: list[str] = field(default_factory=list)
    """What was left undone, one line each: layouts not evaluated or not solved, fewer
    than top_k plans."""
    hook_objective_s: float | None = None
    """Pipeline space with ``extra_constraints``: HiGHS's own objective for the winning
    layout under the user's rows (distplan's figures re-score the plan by its own model
    without them); None otherwise."""
    hook_bound_s: float | None = None
    """As ``hook_objective_s``, HiGHS's dual bound."""
    problem: object | None = None
    """The problem the plans are for when the planner changed the microbatch size (the
    cluster space; same model and global batch), else None."""
    space: str = "pipeline"
    """The plan space searched ("pipeline", "cluster", "fleet")."""
    bound_kind: BoundKind = BoundKind.PROVEN
    """What ``bound_s`` is: proven (pipeline), under the analytic model (cluster), the ideal (fleet)."""
    analytic: bool = False
    """Plans scored by the analytic iteration (cluster, fleet), not the MILP's model."""
    search: SearchResult | None = field(default=None, repr=False, compare=False)
    """The space's own result (``core.space.SearchResult``)."""

    @classmethod
    def of(cls, r: SearchResult) -> SolveResult:
        """The view of one space's search."""
        s = r.solver
        status = s.status if s is not None and r.status == "other" else r.status.value
        return cls(status=status, objective_s=r.objective, bound_s=r.bound, gap=r.gap, seconds=r.seconds,
                   build_seconds=s.build_s if s else 0.0, n_binaries=s.binaries if s else 0,
                   n_constraints=s.constraints if s else 0, plans=list(r.plans),
                   path_name=s.path_name if s else LAYOUT_NAMES.get(r.space, r.space),
                   path=s.path if s else (), log=list(r.log), replicas=r.replicas,
                   lanes=s.lanes if s else (), explored=[dict(e) for e in r.explored],
                   cut_short=list(r.cut_short), hook_objective_s=s.hook_objective_s if s else None,
                   hook_bound_s=s.hook_bound_s if s else None, problem=r.problem, space=r.space,
                   bound_kind=r.bound_kind, analytic=r.analytic, search=r)


#: SolveResult.path_name of the spaces without a MILP layout
LAYOUT_NAMES = {"cluster": "megatron", "fleet": "fleet", "stage": "stages"}
