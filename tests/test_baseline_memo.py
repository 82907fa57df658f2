"""sim.memo.RunMemo and the baselines' MemoScorer give the simulator's own results:
every field of ``sim.simulate``'s SimResult on grid plans (twins that share one run
included), and a grid search scored through the memo picks the same plans with the
same scores as one scored by ``simulated_throughput``."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from distplan import api
from distplan.baselines import grid
from distplan.baselines.scoring import MemoScorer, default_scorer, simulated_throughput
from distplan.sim import SimOptions, simulate
from distplan.sim.memo import RunMemo

PERIOD_FIELDS = {"period_s", "steady", "throughput_per_s"}


@pytest.fixture(scope="module")
def training():
    return api.problem("mlp-xs", "dgx-a100", mode="training", microbatches=4)


def grid_plans(problem, per_layout: int = 2):
    """Distinct grid plans, the first and last training options of every (dp, tp, pp)
    layout (``per_layout`` 1: the first alone), at each precision."""
    paths = grid.device_paths(problem)
    out, seen = [], set()
    for pt in grid.grid_points(problem):
        opts = grid.training_options(problem, pt.dp, pt.tp)
        if pt.options not in (opts[0], opts[-1])[:per_layout]:
            continue
        plan = grid.grid_plan(problem, pt.dp, pt.tp, pt.pp, pt.microbatches, pt.policy, paths[pt.path][1], pt.options)
        if plan is not None and plan not in seen:
            seen.add(plan)
            out.append(plan)
    return out


def assert_same(a, b, skip=frozenset()) -> None:
    for f in dataclasses.fields(a):
        if f.name in skip:
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert np.array_equal(x, y), f.name
        else:
            assert x == y, (f.name, x, y)


def test_memo_results_equal_the_simulators_on_training_grid_plans(training):
    plans = grid_plans(training)
    memo = RunMemo(training)
    for plan in plans:
        want = simulate(training, plan, SimOptions())
        assert_same(memo.simulate(plan), want)
        assert_same(memo.simulate(plan, settle=False), want, skip=PERIOD_FIELDS)
    assert memo.runs < len(plans) and memo.hits >= len(plans)   # bf16 / fp16 twins share a run


def test_twins_share_a_run_but_keep_their_own_figures(training):
    """An all-bf16 and an all-fp16 plan run the same events; each is measured as itself."""
    plan = grid.grid_plan(training, 2, 2, 2, 4, "bf16", grid.device_paths(training)[0][1])
    twin = dataclasses.replace(plan, op_precision=("fp16",) * training.n_ops)
    memo = RunMemo(training)
    assert_same(memo.simulate(plan), simulate(training, plan))
    assert_same(memo.simulate(twin), simulate(training, twin))
    assert (memo.runs, memo.hits) == (1, 1)


def test_memo_results_equal_the_simulators_in_inference():
    pb = api.problem("mlp-xs", "dgx-a100", mode="inference", microbatches=4)
    memo = RunMemo(pb)
    for plan in grid_plans(pb, 1)[:6]:   # the first layouts: pp 1, tp 1 and 2
        assert_same(memo.simulate(plan), simulate(pb, plan))


def test_memo_keeps_at_most_its_node_budget(training):
    memo = RunMemo(training, node_budget=2_000)
    for plan in grid_plans(training, 1)[:12]:
        memo.simulate(plan, settle=False)
    assert memo._nodes <= 2_000


def test_grid_search_through_the_memo_scores_as_the_simulator(training):
    assert isinstance(default_scorer(), MemoScorer)
    fast = grid.search(training, 600, seed=3, max_candidates=60)
    slow = grid.search(training, 600, seed=3, scorer=simulated_throughput, max_candidates=60)
    assert (fast.plan, fast.throughput_per_s, fast.candidates, fast.rejected, fast.implausible) == \
        (slow.plan, slow.throughput_per_s, slow.candidates, slow.rejected, slow.implausible)
    assert [s for _, s in fast.history] == [s for _, s in slow.history]
