"""distplan.testing.asserts: each helper passes on a good plan and fails, with a message
naming the fault, on a bad one; misuse (tensor parallelism, GPipe) is a ValueError."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from distplan.core.plan import Plan, Stage
from distplan.costs.evaluate import plan_cost
from distplan.testing import asserts
from distplan.testing.asserts import (assert_feasible, assert_not_better_than_optimum,
                                      assert_simulated_matches_model)
from distplan.testing.corpus import load_corpus

TIGHT = load_corpus(["tiny-07-rand5-line3-tight"])[0]     # memory binds: one device cannot hold all
ROOMY = load_corpus(["tiny-22-rand3-line3-mixed"])[0]     # a slow device runs fp16 only


def _all_on_device_0(inst) -> Plan:
    pb = inst.problem()
    return Plan((0,) * pb.n_ops, (pb.precisions[-1],) * pb.n_ops, (Stage((0,)),), pb.microbatches, pb.schedule)


def test_good_plans_pass_every_helper():
    pb, plan = TIGHT.problem(), TIGHT.plan()
    assert_feasible(pb, plan)
    period = assert_simulated_matches_model(pb, plan)
    assert period == plan_cost(pb, plan).period_s
    assert assert_not_better_than_optimum(pb, plan, TIGHT) == period
    assert assert_not_better_than_optimum(pb, plan, TIGHT.optimum_s) == period


def test_assert_feasible_lists_each_violation():
    pb = TIGHT.problem()
    with pytest.raises(AssertionError, match=r"infeasible for graph .*: 1 violation.*\n  - device d0: needs .* MiB"):
        assert_feasible(pb, _all_on_device_0(TIGHT))
    good = TIGHT.plan()
    backwards = dataclasses.replace(good, op_stage=tuple(reversed(sorted(good.op_stage))))
    with pytest.raises(AssertionError, match="flows from stage"):
        assert_feasible(pb, backwards)
    rp = ROOMY.problem()
    slow = next(d for d in range(rp.n_devices) if not rp.topology.kind_of(d).supports("int8"))
    on_slow = Plan((0,) * rp.n_ops, ("int8",) * rp.n_ops, (Stage((slow,)),), rp.microbatches, rp.schedule)
    with pytest.raises(AssertionError, match="precision int8 not supported by device"):
        assert_feasible(rp, on_slow)


def test_a_feasible_plan_below_the_optimum_blames_the_optimum():
    pb, plan = TIGHT.problem(), TIGHT.plan()
    with pytest.raises(AssertionError, match=r"FEASIBLE plan .* beats the proven optimum .* by 50\.0+%"):
        assert_not_better_than_optimum(pb, plan, 2 * TIGHT.optimum_s)
    # within the tolerance is not "better"
    assert_not_better_than_optimum(pb, plan, TIGHT.optimum_s * (1 + 1e-12))


def test_an_infeasible_plan_below_the_optimum_is_named_infeasible():
    pb = TIGHT.problem()
    cheat = _all_on_device_0(TIGHT)
    with pytest.raises(AssertionError, match="but the plan is infeasible: device d0: needs"):
        assert_not_better_than_optimum(pb, cheat, 10 * plan_cost(pb, cheat).period_s)


def test_a_simulator_that_disagrees_with_the_model_fails(monkeypatch):
    pb, plan = ROOMY.problem(), ROOMY.plan()
    real = asserts.simulate

    def skewed(problem, p, options=None):
        r = real(problem, p, options)
        return dataclasses.replace(r, period_s=r.period_s * (1 + 1e-6))

    monkeypatch.setattr(asserts, "simulate", skewed)
    with pytest.raises(AssertionError, match=r"ideal simulated period .* != cost-model period .*relative difference 1e-06"):
        assert_simulated_matches_model(pb, plan)
    assert_simulated_matches_model(pb, plan, rel=1e-5)

    def unsteady(problem, p, options=None):
        return dataclasses.replace(real(problem, p, options), steady=False)

    monkeypatch.setattr(asserts, "simulate", unsteady)
    with pytest.raises(AssertionError, match="no steady state"):
        assert_simulated_matches_model(pb, plan)


def test_misuse_is_a_value_error():
    pb, plan = ROOMY.problem(), ROOMY.plan()
    tp = dataclasses.replace(plan, stages=(Stage((0, 1), tensor_parallel=2),) + plan.stages[1:])
    for helper in (assert_simulated_matches_model, lambda p, x: assert_not_better_than_optimum(p, x, 1.0)):
        with pytest.raises(ValueError, match="tensor_parallel"):
            helper(pb, tp)
    train = load_corpus(["tiny-17-chain4-line3-train"])[0]
    gpipe = dataclasses.replace(train.plan(), schedule="gpipe")
    with pytest.raises(ValueError, match="gpipe.*no steady state"):
        assert_simulated_matches_model(train.problem(), gpipe)
    with pytest.raises(ValueError, match="NaN"):
        assert_not_better_than_optimum(pb, plan, float(np.nan))
