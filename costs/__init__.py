"""Cost models and the Problem: the one source of numbers for model/ and sim/."""
from distplan.costs.problem import Problem, ProblemOptions, build_problem

__all__ = ["Problem", "ProblemOptions", "build_problem"]
