"""The typed Python API: everything the CLI, ``--compare``, the studies and a notebook
call. It sits above the planner, the simulator and the baselines, below the CLI.

    p = problem("bert-base", "mcm4x4")                     # -> costs.Problem
    rep = solve(p, SolveOptions(time_limit_s=30))          # -> SolveReport (ranked, simulated)
    simulate(p, rep.best.plan)                             # -> SimResult
    check(p, plan)                                         # raises InfeasiblePlan
    compare(p, ("random", "sa"), budget_s=30)              # -> Comparison
"""
from distplan.api.compare import Comparison, MethodRow, compare
from distplan.api.options import sensitivity_budget_value
from distplan.api.pipeline import check, rank_plans, simulate, solve
from distplan.api.problem import problem
from distplan.api.resolve import parse_input_shape
from distplan.api.report import RankedPlan, SolveReport, plan_difference
from distplan.core.plan import Plan
from distplan.costs.plan_file import load_plan_file as load_plan
from distplan.costs.plan_file import save_plan
from distplan.costs.problem import Problem, ProblemOptions
from distplan.model import SolveOptions, SolveResult
from distplan.sim import SimOptions, SimResult


def from_module(module, example_inputs, mode: str = "inference", name: str | None = None):
    """Trace a torch ``nn.Module`` into a distplan Graph (needs the ``torch`` extra; see
    ``distplan.workloads.torch_import``)."""
    from distplan.workloads.torch_import import import_module

    return import_module(module, example_inputs, mode=mode, name=name)


__all__ = ["problem", "solve", "simulate", "check", "compare", "from_module", "load_plan", "save_plan",
           "sensitivity_budget_value", "parse_input_shape", "rank_plans", "plan_difference",
           "Problem", "ProblemOptions", "SolveOptions", "SolveResult", "SolveReport", "RankedPlan",
           "SimOptions", "SimResult", "Comparison", "MethodRow", "Plan"]
