"""Proving an instance's optimum: exhaustive enumeration, or the MILP at gap 0 per layout.

    proof = prove_brute_force(problem)   # tiny instances: every plan of the space scored
    proof = prove_milp(problem)          # larger ones: one MILP per lane layout, gap 0
    proof = reprove(instance)            # the method the corpus instance names

``prove_milp`` solves the planner's MILP once per lane layout of the space
(``SolveOptions(path=<layout>, rel_gap=0)``) and takes the least objective and the
least bound. It does not trust ``distplan.model.solve``'s default run to cover every
layout: that run solves one layout per replication factor, chosen by a heuristic.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from distplan.core.errors import DistplanError
from distplan.core.plan import Plan
from distplan.costs.check import plan_violations
from distplan.costs.evaluate import plan_cost
from distplan.costs.problem import Problem
from distplan.model import SolveOptions, solve
from distplan.testing.brute_force import DEFAULT_MAX_CANDIDATES, brute_force_optimum, layouts
from distplan.testing.corpus import PROOF_BRUTE_FORCE, PROOF_MILP, CorpusInstance

__all__ = ["Proof", "prove_brute_force", "prove_milp", "reprove"]

#: Relative gap above which a layout's MILP run does not count as proven.
MILP_PROOF_TOL = 1e-6


@dataclass(frozen=True)
class Proof:
    """A proven optimum: ``plan`` has period ``optimum_s``; no plan of the space is below
    ``bound_s``. ``detail`` is deterministic (no timings); ``seconds`` is how long it took."""

    method: str
    optimum_s: float
    bound_s: float
    plan: Plan
    detail: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def prove_brute_force(problem: Problem, max_candidates: int = DEFAULT_MAX_CANDIDATES) -> Proof:
    """Enumerate the whole space (``distplan.testing.brute_force``); DistplanError when no
    plan is feasible or the space is too large."""
    t0 = time.perf_counter()
    r = brute_force_optimum(problem, max_candidates=max_candidates)
    if r.plan is None:
        raise DistplanError(f"no feasible plan among {r.n_candidates} candidates: nothing to prove")
    detail = {"candidates": r.n_candidates, "feasible": r.n_feasible, "layouts": r.n_layouts}
    return Proof(PROOF_BRUTE_FORCE, r.period_s, r.period_s, r.plan, detail, time.perf_counter() - t0)


def prove_milp(problem: Problem, time_limit_s: float = 300.0, threads: int = 2) -> Proof:
    """Solve every lane layout of the space to gap 0 (``distplan.model.solve`` with the
    layout forced). A layout the planner proves has no plan that fits counts as
    infeasible; a layout not closed within ``time_limit_s`` raises DistplanError."""
    t0 = time.perf_counter()
    best: tuple[float, Plan] | None = None
    bounds, solved, empty = [], 0, 0
    for name, _ in layouts(problem):
        opts = SolveOptions(top_k=1, rel_gap=0.0, time_limit_s=time_limit_s, threads=threads, path=name)
        try:
            r = solve(problem, opts)
        except DistplanError as e:
            if "time limit" in str(e):
                raise DistplanError(f"layout {name}: not proven within {time_limit_s:g} s ({e})") from None
            empty += 1   # the planner proved that no plan of this layout fits
            continue
        if r.status != "optimal" or r.gap > MILP_PROOF_TOL:
            raise DistplanError(f"layout {name}: MILP status {r.status}, gap {r.gap:.3g}; not proven")
        plan = r.plans[0]
        bad = plan_violations(problem, plan)
        if bad:
            raise DistplanError(f"layout {name}: the MILP's plan is infeasible: {bad[0]}")
        period = plan_cost(problem, plan).period_s
        solved += 1
        bounds.append(min(r.bound_s, period))
        if best is None or period < best[0]:
            best = (period, plan)
    if best is None:
        raise DistplanError("no layout has a feasible plan: nothing to prove")
    detail = {"layouts": solved + empty, "layouts_solved": solved, "layouts_without_plan": empty,
              "rel_gap": 0.0, "tolerance": MILP_PROOF_TOL}
    return Proof(PROOF_MILP, best[0], min(bounds), best[1], detail, time.perf_counter() - t0)


def reprove(instance: CorpusInstance, time_limit_s: float = 300.0) -> Proof:
    """Prove ``instance`` again by the method it names."""
    if instance.proof == PROOF_BRUTE_FORCE:
        return prove_brute_force(instance.problem())
    if instance.proof == PROOF_MILP:
        return prove_milp(instance.problem(), time_limit_s=time_limit_s)
    raise DistplanError(f"corpus instance {instance.name!r}: unknown proof {instance.proof!r}")

