"""The optimisation model: a Pyomo MILP over pipeline stages along a device path, per-op
precision, memory, links and sensitivity, solved by HiGHS (see model.build)."""
from distplan.model.options import SolveOptions, SolveResult
from distplan.model.budget import budget_from_fraction
from distplan.model.planner import solve

__all__ = ["SolveOptions", "SolveResult", "budget_from_fraction", "solve"]
