"""The one plan-space interface (issue 23): every space (pipeline MILP, cluster, fleet,
the baselines) is a ``PlanSpace`` whose ``search(problem, options, clock)`` returns one
``SearchResult``; a Ctrl-C once a plan exists keeps the best plan in every space."""
from __future__ import annotations

import math

import pytest

import distplan
from distplan.baselines import analytic_throughput
from distplan.baselines.result import BaselineResult
from distplan.baselines.spaces import BaselineSpace
from conftest import chain_graph, line_topology
from distplan.core.clock import Clock
from distplan.costs import ProblemOptions, build_problem
from distplan.core.interrupt import Stop
from distplan.core.space import BoundKind, PlanSpace, SearchResult, Status
from distplan.model import SolveOptions, SolveResult
from distplan.model.spaces import SPACES, resolve_space


class StopAtFirstPlan(Stop):
    """A Ctrl-C that lands the moment a space first has a plan worth keeping (``arm``)."""

    def arm(self) -> None:
        super().arm()
        self.request()


@pytest.fixture(scope="module")
def pipeline_problem():
    return distplan.problem("mlp-xs", "mcm2x2")


@pytest.fixture(scope="module")
def cluster_problem():
    return distplan.problem("gpt3-1.3b", "a100x64", mode="training")


@pytest.fixture(scope="module")
def fleet_problem():
    return distplan.problem("gpt2", "hybrid-v100-t4", mode="training")


def test_every_space_is_a_plan_space():
    for space in [*SPACES.values(), BaselineSpace("sa")]:
        assert isinstance(space, PlanSpace)
    assert sorted(SPACES) == ["cluster", "fleet", "pipeline", "stage"]


def test_resolve_space_picks_the_space_object(pipeline_problem, cluster_problem, fleet_problem):
    assert resolve_space(pipeline_problem, SolveOptions()) is SPACES["pipeline"]
    assert resolve_space(cluster_problem, SolveOptions()) is SPACES["cluster"]
    assert resolve_space(fleet_problem, SolveOptions()) is SPACES["fleet"]
    assert resolve_space(cluster_problem, SolveOptions(space="pipeline")).name == "pipeline"


def test_the_pipeline_search_reports_its_solver(pipeline_problem):
    r = SPACES["pipeline"].search(pipeline_problem, SolveOptions(time_limit_s=20), Clock(20))
    assert isinstance(r, SearchResult) and r.status == Status.OPTIMAL and r.plans
    assert r.bound_kind == BoundKind.PROVEN and not r.analytic
    assert r.solver is not None and r.solver.binaries > 0 and r.solver.constraints > 0
    assert r.gap <= 0.01 and r.objective == r.plans[0].predicted["milp_objective"]
    view = SolveResult.of(r)
    assert (view.n_binaries, view.path_name, view.status) == (r.solver.binaries, r.solver.path_name, "optimal")
    assert type(view.status) is str and view.search is r


def test_no_solver_report_where_no_milp_ran(cluster_problem):
    r = SPACES["cluster"].search(cluster_problem, SolveOptions(time_limit_s=60), Clock(60))
    assert r.solver is None and r.bound_kind == BoundKind.ANALYTIC and r.analytic
    assert r.status in (Status.OPTIMAL, Status.SEARCHED) and r.plans
    view = SolveResult.of(r)
    assert (view.space, view.path_name, view.n_binaries, view.build_seconds) == ("cluster", "megatron", 0, 0.0)


def test_a_baseline_has_no_bound(pipeline_problem):
    r = BaselineSpace("random", max_candidates=10).search(pipeline_problem, SolveOptions(seed=3), Clock(30))
    assert r.solver is None and r.bound_kind == BoundKind.NONE and r.bound == -math.inf and r.gap == math.inf
    assert r.status == Status.SEARCHED and r.details["stopped_by"] == "candidates"
    view = BaselineResult.of(r)
    assert view.plan is r.plans[0] and view.candidates == 10
    assert math.isclose(r.objective, pipeline_problem.graph.batch_size / view.throughput_per_s)


# --- Ctrl-C through the one interface: the best plan is kept in every space ---------

def _interrupted(space: PlanSpace, problem, options: SolveOptions) -> SearchResult:
    clock = Clock(120, stop=StopAtFirstPlan())
    r = space.search(problem, options, clock)
    assert clock.stop.requested
    assert r.status == Status.INTERRUPTED, (r.status, r.cut_short)
    assert r.plans and math.isfinite(r.objective)
    assert r.cut_short   # what the stop left undone
    return r


def test_ctrl_c_keeps_the_best_plan_in_the_pipeline_space(pipeline_problem):
    r = _interrupted(SPACES["pipeline"], pipeline_problem, SolveOptions(time_limit_s=120))
    assert r.bound <= r.objective   # the bound proven so far
    distplan.check(pipeline_problem, r.plans[0])


def test_ctrl_c_keeps_the_best_plan_in_the_cluster_space(cluster_problem):
    r = _interrupted(SPACES["cluster"], cluster_problem, SolveOptions(time_limit_s=120))
    assert r.bound <= r.objective


def test_ctrl_c_keeps_the_best_plan_in_the_fleet_space(fleet_problem):
    _interrupted(SPACES["fleet"], fleet_problem, SolveOptions(time_limit_s=120))


@pytest.mark.parametrize("method", ["random", "sa", "dp", "grid"])
def test_ctrl_c_keeps_the_best_plan_in_a_baseline(method):
    problem = build_problem(chain_graph(4), line_topology(2), ProblemOptions())   # every baseline finds plans
    r = _interrupted(BaselineSpace(method, scorer=analytic_throughput), problem, SolveOptions())
    assert r.details["stopped_by"] == "interrupted" and len(r.plans) == 1
