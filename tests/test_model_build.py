"""model.build's cut families on a hand-sized chain: ``nogood`` forbids exactly the
excluded plans' projections, ``period_relax`` states the bound it is given, and each
family names its components."""
from __future__ import annotations

import pyomo.environ as pyo
import pytest

from distplan.costs.problem import ProblemOptions, build_problem
from distplan.model.build import ModelSpec, add_nogood_cut, build_model
from distplan.model.extract import assign_plan, make_plan

from test_model_solve import chain, mesh_topology
from test_model_solve import problem as chain_problem

PATH = (0, 1, 2, 3)


def broken(m) -> list[str]:
    out = []
    for c in m.component_data_objects(pyo.Constraint, active=True):
        body = pyo.value(c.body)
        if (c.lb is not None and body < c.lb - 1e-9) or (c.ub is not None and body > c.ub + 1e-9):
            out.append(c.name)
    return out


def test_nogood_forbids_exactly_the_excluded_projection():
    pb = chain_problem(n=4)
    a = make_plan(pb, PATH, [0, 0, 1, 1], [0, 0, 0, 0])
    b = make_plan(pb, PATH, [0, 1, 1, 1], [0, 0, 0, 0])        # one op moved
    c = make_plan(pb, PATH, [0, 0, 1, 1], [0, 0, 0, 1])        # one precision changed
    m = build_model(pb, ModelSpec(path=PATH, excluded=(a,)))
    assert len(m.nogood) == 1
    for plan, want in ((a, ["nogood[1]"]), (b, []), (c, [])):
        assign_plan(m, pb, plan)
        assert broken(m) == want
    add_nogood_cut(m, pb, b)                                    # the top-K phase's incremental cut
    assign_plan(m, pb, b)
    assert broken(m) == ["nogood[2]"]


def test_nogood_without_binaries_is_none():
    """One stage and one precision: no binaries, the plan is the only one."""
    pb = build_problem(chain(2), mesh_topology(1, 1), ProblemOptions(precisions=("fp16",)))
    m = build_model(pb, ModelSpec(path=(0,)))
    assert add_nogood_cut(m, pb, make_plan(pb, (0,), [0, 0], [0, 0])) is None
    assert len(m.nogood) == 0


@pytest.mark.parametrize("objective, lb, present", [("throughput", 2e-4, True), ("throughput", 0.0, False),
                                                    ("latency", 2e-4, False)])
def test_period_bound_is_a_cut_on_T(objective, lb, present):
    pb = chain_problem(n=4)
    m = build_model(pb, ModelSpec(path=PATH, objective=objective, period_lb_s=lb))
    assert hasattr(m, "period_relax") == present
    if present:
        assert pyo.value(m.period_relax.lower) == pytest.approx(m.tscale * lb * (1 - 1e-9), rel=1e-15)
        assert m.period_relax.body is m.T
