"""The accuracy/speed frontier: ``pareto(problem, n)`` solves under ``n`` sensitivity
budgets, from 0 (every op at the highest precision it may use) to the sensitivity of the
fastest plan found without a budget, simulates every plan, and reports for each budget
the best simulated plan whose sensitivity is within it.

Monotone by construction: a plan within a budget is within every larger one, so each
point takes the best plan of its own solve *and of every solve at a lower budget*; a
larger budget never shows lower throughput. Each point's plan is simulated (training:
per optimizer step; inference: steady state).
"""
from __future__ import annotations

import dataclasses
import math
import signal
from dataclasses import dataclass

from distplan.baselines.scoring import sim_rate
from distplan.core.atomic import save_figure
from distplan.core.errors import DistplanError
from distplan.core.clock import Clock
from distplan.core.interrupt import Interrupted, stop_on_interrupt
from distplan.core.plan import Plan
from distplan.core.validate import check_callable, check_instance, check_int
from distplan.costs.evaluate import plan_sensitivity
from distplan.costs.problem import Problem
from distplan.model import SolveOptions


#: the least seconds a frontier point's solve gets (the time limit is shared among them)
MIN_POINT_S = 1.0


@dataclass(frozen=True)
class ParetoPoint:
    budget: float              # the sensitivity budget of this point
    sensitivity: float         # the chosen plan's sensitivity (<= budget)
    throughput_per_s: float    # simulated: per step in training, steady in inference
    plan: Plan
    problem: Problem           # the problem the plan is for (its microbatch size may differ)
    from_budget: float         # the budget of the solve that found the plan


class Frontier(list):
    """The frontier's points (a list of ParetoPoint); ``interrupted``: the signal that
    stopped it ("Ctrl-C", "SIGTERM") or "" when every budget was solved; ``unsolved``:
    the budgets a signal left unsolved (their points may still hold a plan of a lower
    budget's solve)."""

    interrupted: str = ""
    unsolved: int = 0


def check_points(n: int, limit_s: float) -> None:
    """``n`` points fit ``limit_s`` (each point's solve gets at least ``MIN_POINT_S``), or a
    DistplanError with both figures; the CLI asks before it loads the workload."""
    if n < 2:
        raise DistplanError(f"--pareto needs at least 2 points, got {n}")
    if n * MIN_POINT_S > limit_s:
        raise DistplanError(f"--pareto {n:,} points need at least {n * MIN_POINT_S:,.0f} s ({MIN_POINT_S:g} s of "
                            f"solving each) and the time limit is {limit_s:g} s; ask for at most "
                            f"{max(2, int(limit_s // MIN_POINT_S)):,} points or a longer --time-limit")


def pareto(problem: Problem, n: int, options: SolveOptions | None = None,
           progress=None) -> list[ParetoPoint]:
    """``n`` >= 2 frontier points (module docstring); ``options.time_limit_s`` bounds the
    whole frontier (each solve gets an equal share of what is left). A Ctrl-C or
    SIGTERM once the fastest plan is simulated stops the frontier there: the budgets
    not solved yet take the plans found so far (``Frontier.interrupted`` says so)."""
    check_instance("problem", problem, Problem, "build one with distplan.problem(workload, topology, ...)")
    check_int("n", n)
    options = check_instance("options", options, SolveOptions, "use distplan.SolveOptions(...)") \
        if options is not None else SolveOptions()
    check_callable("progress", progress, "a function of one line of text")
    if options.objective != "throughput":
        raise DistplanError(f"options.objective {options.objective!r} does not apply to the frontier, which trades "
                            "sensitivity for simulated throughput; use the default objective 'throughput'")
    if options.sensitivity_budget is not None:
        raise DistplanError("options.sensitivity_budget does not apply to the frontier: it sets each point's "
                            "budget itself; leave it None")
    check_points(n, options.time_limit_s)
    with stop_on_interrupt() as stop:
        return _pareto(problem, n, options, progress, stop)


def _pareto(problem: Problem, n: int, options: SolveOptions | None, progress, stop) -> Frontier:
    from distplan.api.pipeline import solve

    options = options or SolveOptions()
    say = progress or (lambda _m: None)
    clock = Clock(options.time_limit_s, stop=stop)   # the whole frontier's limit, shared by its points

    def run(budget: float | None, left_points: int):
        share = max(MIN_POINT_S, clock.remaining_s() / left_points)
        opts = dataclasses.replace(options, sensitivity_budget=budget, time_limit_s=share, progress=None)
        return solve(problem, opts)

    top = run(None, n)
    if top.interrupted and not top.best.simulated:   # a signal stopped the fastest plan's simulation
        raise Interrupted(stop.signum if stop.signum is not None else signal.SIGINT)
    if not top.best.simulated:
        raise DistplanError("--pareto compares simulated plans and the time limit left the fastest plan "
                            f"unsimulated ({'; '.join(top.cut_short)}); give a longer --time-limit")
    s_max = plan_sensitivity(top.problem, top.best.plan)
    say(f"pareto: fastest plan {sim_rate(top.problem, top.best.sim):,.1f}/s at sensitivity {s_max:.6g}")
    found = [(s_max, sim_rate(top.problem, top.best.sim), top.best.plan, top.problem, math.inf)]
    points = Frontier()
    if top.interrupted:
        points.interrupted = top.interrupted_by or "Ctrl-C"
    stop.arm()   # the fastest plan is simulated: a signal now ends the frontier with what it has
    budgets = [s_max * i / (n - 1) for i in range(n)]
    for i, b in enumerate(budgets):
        if i == n - 1:
            rep = top
        elif stop.requested:
            points.interrupted = stop.name
            points.unsolved += 1
            rep = None
        else:
            try:
                rep = run(b, n - i)
            except DistplanError as e:
                say(f"pareto: budget {b:.6g}: {e}")
                rep = None
            if rep is not None and rep.interrupted:
                points.interrupted = rep.interrupted_by or stop.name
        if rep is not None:
            for r in (x for x in rep.plans if x.simulated):
                found.append((plan_sensitivity(rep.problem, r.plan), sim_rate(rep.problem, r.sim), r.plan,
                              rep.problem, b))
        within = [f for f in found if f[0] <= b * (1 + 1e-9) + 1e-12]
        if not within:
            say(f"pareto: budget {b:.6g}: no plan found within it")
            continue
        s, rate, plan, pb, fb = max(within, key=lambda f: (f[1], -f[0]))
        points.append(ParetoPoint(b, s, rate, plan, pb, fb))
        say(f"pareto: budget {b:.6g}: {rate:,.1f}/s (sensitivity {s:.6g})")
    return points


def _mix(plan: Plan) -> str:
    """The precision mix, and the ops some replicas run at another precision (replica groups)."""
    from distplan.api.report import precision_mix

    over: dict[str, set[int]] = {}
    for st in plan.stages:
        for i in range(st.replicas):
            for v, p in st.overrides(i).items():
                over.setdefault(p, set()).add(v)
    extra = "; ".join(f"{len(vs)} ops at {p} on some replicas" for p, vs in sorted(over.items()))
    return precision_mix(plan) + (f" ({extra})" if extra else "")


def pareto_table(points: list[ParetoPoint]) -> str:
    """One row per point: budget, sensitivity, simulated throughput, precision mix."""
    lines = [f"{'budget':>10} {'sensitivity':>12} {'samples/s':>11}  precision mix [found at budget]"]
    for p in points:
        fb = "unbounded" if math.isinf(p.from_budget) else f"{p.from_budget:.4g}"
        lines.append(f"{p.budget:>10.4g} {p.sensitivity:>12.4g} {p.throughput_per_s:>11.5g}  "
                     f"{_mix(p.plan)} [{fb}]")
    return "\n".join(lines)


def plot_pareto(points: list[ParetoPoint], path, title: str) -> None:
    """The frontier as a step plot (sensitivity budget -> simulated samples/s)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.step([p.budget for p in points], [p.throughput_per_s for p in points], where="post", label="frontier")
    ax.plot([p.sensitivity for p in points], [p.throughput_per_s for p in points], "o", label="chosen plans")
    ax.set_xlabel("sensitivity budget (QSync-style proxy)")
    ax.set_ylabel("simulated samples/s")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    try:
        save_figure(fig, path, "pareto plot")
    finally:
        plt.close(fig)


__all__ = ["Frontier", "ParetoPoint", "pareto", "pareto_table", "plot_pareto"]
