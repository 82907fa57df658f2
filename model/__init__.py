"""The optimisation model: a Pyomo MILP over pipeline stages along a device path, per-op
precision, memory, links and sensitivity, solved by HiGHS.

Modules: build (the MILP, one add_<family> per constraint family, the user hook),
extract (plans <-> variable values), highs (HiGHS runs), planner (``solve``: four
phases, phase_fast / phase_budget / phase_milp / phase_topk), inputs (checks, what to
explore), admission (outside plans vs user constraints), progress (log; the clock is core.clock),
heuristic and downsets (warm starts, relaxation bound), lanes (replicated pipelines),
budget (bisection under a sensitivity budget) with chain_dp, segments, savings and the
pure knapsack, options (SolveOptions, SolveResult), spaces (the pipeline, cluster and
fleet spaces as core.space.PlanSpace objects, resolve_space), pipeline_space."""
from distplan.model.options import SolveOptions, SolveResult
from distplan.model.budget import budget_from_fraction
from distplan.model.planner import solve

__all__ = ["SolveOptions", "SolveResult", "budget_from_fraction", "solve"]
