"""Baseline searches distplan's MILP is measured against, each scoring candidates with
the same simulator and the same feasibility checker, each given a wall-clock budget and
a seed: random search, simulated annealing, a DP pipeline partitioner, and a
data x tensor x pipeline grid search. ``run_baseline(name, problem, budget_s, seed)``
dispatches by name.
"""
from __future__ import annotations

from collections.abc import Callable

from distplan.baselines import annealing, dp, grid, random_search
from distplan.baselines.result import BaselineResult, Tracker
from distplan.baselines.scoring import SCORERS, Scorer, analytic_throughput, ideal_throughput, simulated_throughput
from distplan.core.errors import DistplanError

#: name -> search(problem, budget_s, seed=0, scorer=None, sensitivity_budget=None, max_candidates=None)
METHODS: dict[str, Callable[..., BaselineResult]] = {
    "random": random_search.search,
    "sa": annealing.search,
    "dp": dp.search,
    "grid": grid.search,
}


def parse_methods(text: str) -> list[str]:
    """'random,sa' -> ['random', 'sa'], with an error naming any unknown method."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in METHODS]
    if bad or not names:
        raise DistplanError(f"unknown baseline(s) {', '.join(bad) or repr(text)}; choose from {','.join(METHODS)}")
    return list(dict.fromkeys(names))


def run_baseline(name: str, problem, budget_s: float, seed: int = 0, **kw) -> BaselineResult:
    """Run baseline ``name`` (a key of METHODS)."""
    return METHODS[parse_methods(name)[0]](problem, budget_s, seed, **kw)


__all__ = ["METHODS", "BaselineResult", "Tracker", "Scorer", "SCORERS", "parse_methods", "run_baseline",
           "analytic_throughput", "ideal_throughput", "simulated_throughput"]
