"""Scorers: a function ``(problem, plan) -> samples per second`` that a baseline
maximises. The default is the realistic simulator (``sim.simulate`` with
``SimOptions()``), the same judge the MILP's plans face. ``ideal_throughput`` uses the
simulator's ideal mode and ``analytic_throughput`` the analytic steady-state period
(``costs.evaluate.plan_cost``): both are the MILP's own cost model, so a baseline scored
with them can be compared with the MILP's proven optimum (they agree for
tensor_parallel = 1).
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from distplan.costs.evaluate import plan_cost
from distplan.costs.problem import Problem
from distplan.core.plan import Plan

Scorer = Callable[[Problem, Plan], float]


def simulated_throughput(problem: Problem, plan: Plan) -> float:
    """Samples/s of ``plan`` in the realistic simulator (``sim.SimOptions()``): the steady
    rate in inference, per optimizer step in training (fill, drain, exposed gradient
    reduction and optimizer included: what a training run pays); 0 when the
    simulated peak of a device's own outputs exceeds its capacity (a tensor-parallel
    stream stage can hold more than the checker's bound: its all-reduces deepen the
    buffering)."""
    from distplan.sim import SimOptions, simulate

    return fitting_rate(problem, simulate(problem, plan, SimOptions()))


def fitting_rate(problem: Problem, sim) -> float:
    """``sim_rate``, or 0 when the simulated peak of a device's own outputs exceeds its
    capacity."""
    if (sim.peak_own_memory_bytes > problem.device_mem_bytes * (1 + 1e-12)).any():
        return 0.0
    return sim_rate(problem, sim)


class MemoScorer:
    """``simulated_throughput`` for a search's many candidates: one ``sim.memo.RunMemo``
    per problem, so plans whose event runs are equal share one run, and in training no
    longer run for the steady-state period, which a step's score does not read. Every
    score equals ``simulated_throughput``'s (tests/test_baseline_memo.py). A search over
    several problems (the grid's rank problems, ``baselines.grid_ranks``) keeps the memos
    of the ``MEMO_PROBLEMS`` it scored last, the node budget (``sim.memo.MEMO_NODE_BUDGET``)
    shared equally among them (one problem: all of it); ``memo`` is the one used last."""

    #: problems whose memos are kept at once
    MEMO_PROBLEMS = 4

    def __init__(self) -> None:
        self.memo = None
        self._memos: OrderedDict[int, object] = OrderedDict()

    def __call__(self, problem: Problem, plan: Plan) -> float:
        from distplan.sim.memo import MEMO_NODE_BUDGET, RunMemo

        memo = self._memos.get(id(problem))
        if memo is None or memo.problem is not problem:
            memo = self._memos[id(problem)] = RunMemo(problem)
            while len(self._memos) > self.MEMO_PROBLEMS:
                self._memos.popitem(last=False)
            for m in self._memos.values():   # each evicts its oldest runs past its share at its next run
                m.node_budget = MEMO_NODE_BUDGET // len(self._memos)
        self._memos.move_to_end(id(problem))
        self.memo = memo
        return fitting_rate(problem, memo.simulate(plan, settle=not problem.training))


def sim_rate(problem: Problem, sim) -> float:
    """A simulation's samples/s as plans are scored: per optimizer step in training,
    the steady rate in inference."""
    return float(sim.step_throughput_per_s if problem.training else sim.throughput_per_s)


def ideal_throughput(problem: Problem, plan: Plan) -> float:
    """Samples/s of ``plan`` in the simulator's ideal mode (the MILP's model)."""
    from distplan.sim import SimOptions, simulate

    return float(simulate(problem, plan, SimOptions(ideal=True)).throughput_per_s)


def analytic_throughput(problem: Problem, plan: Plan) -> float:
    """batch_size / analytic period: the MILP's objective turned into samples/s."""
    period = plan_cost(problem, plan).period_s
    return problem.graph.batch_size / period if period > 0 else float("inf")


SCORERS: dict[str, Scorer] = {"sim": simulated_throughput, "ideal": ideal_throughput,
                              "analytic": analytic_throughput}


def default_scorer() -> Scorer:
    """A fresh ``MemoScorer`` (the simulator's scores, each distinct run made once)."""
    return MemoScorer()
