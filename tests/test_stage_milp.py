"""The stage MILP (model.stage_milp, model.stage_space): heterogeneous stages are
estimated as the simulator runs them, the MILP's linear terms equal the documented
objective computed stage by stage (distplan.testing.stage_oracle), and on tiny
instances its optimum equals the brute force of the whole declared space."""
from __future__ import annotations

import dataclasses
import math
import random

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import distplan
from distplan.api.problem import problem as make_problem
from distplan.core.clock import Clock
from distplan.core.errors import DistplanError
from distplan.core.plan import Plan, Stage
from distplan.costs.iteration import estimate_iteration
from distplan.model import SolveOptions
from distplan.model.stage_milp import StageMilp, model_objective_s, objective_lb_s
from distplan.model.cluster import _Space, plan_cluster
from distplan.model.stage_space import build_plan, plan_stages, solve_checked
from distplan.model.stage_terms import stage_configs, stage_terms, undominated
from distplan.sim import simulate
from distplan.testing.stage_oracle import stage_objective_s, stage_optimum
from distplan.topologies import kinds as K
from distplan.topologies.builders import rail_cluster


def _topo(nodes: int, per_node: int, mem_bytes: float | None = None):
    kind = K.A100 if mem_bytes is None else dataclasses.replace(K.A100, mem_capacity_bytes=mem_bytes)
    return rail_cluster(f"tiny{nodes}x{per_node}", nodes, per_node, kind, K.NVLINK3_BW_BYTES_PER_S,
                        K.NVLINK_LATENCY_S, K.IB_HDR_PORT_BW_BYTES_PER_S, K.IB_LATENCY_S)


def _problem(layers: int, nodes: int, per_node: int, M: int, seq: int = 128, mem: float | None = None):
    return make_problem(f"gpt3-256x{layers}x4", _topo(nodes, per_node, mem), batch_size=1, seq_len=seq,
                        mode="training", precisions=("bf16",), microbatches=M)


@pytest.mark.parametrize("stages,split,rel", [
    ((Stage((0,)), Stage((2, 3))), (0, 1, 1, 1), 1e-9),            # dp 1 | dp 2
    ((Stage((0,)), Stage((4, 5, 6, 7))), (0, 1, 1, 1), 1e-9),      # dp 1 | dp 4
    ((Stage((0, 1), 2), Stage((2, 3))), (0, 0, 1, 1), 3e-4),       # tp 2 | dp 2: 1.2e-4 off
    ((Stage((0, 1)), Stage((4, 5, 6, 7), 2)), (0, 0, 1, 1), 2e-3),  # dp 2 | tp 2 x dp 2
])
def test_stages_with_their_own_dp_and_tp_are_estimated_as_simulated(stages, split, rel):
    """Stages whose replica counts differ are replayed (costs.iteration.replica_groups);
    the closed form charged dp 1 | dp 2 0.00399938 s against 0.00339522 s simulated."""
    p = _problem(4, 2, 4, 8)
    units = _Space(p, "bf16").units
    op_stage = [0] * p.n_ops
    for u, k in zip(units, split):
        for v in u:
            op_stage[v] = k
    plan = Plan(tuple(op_stage), ("bf16",) * p.n_ops, stages, 8, "1f1b")
    assert estimate_iteration(p, plan).iteration_s == pytest.approx(simulate(p, plan).iteration_s, rel=rel)


def test_linear_terms_equal_the_objective_computed_stage_by_stage():
    """For random assignments (2 nodes of 4, 4 layers, 4 microbatches), the MILP's
    coefficients summed (model_objective_s) = the oracle's objective of the same plan."""
    p = _problem(4, 2, 4, 4)
    space = _Space(p, "bf16")
    t = stage_terms(p, space, stage_configs(p))
    rng = random.Random(0)
    seen = 0
    while seen < 60:
        K = rng.randint(1, 4)
        cut = sorted(rng.sample(range(1, 4), K - 1))
        edges = (0, *cut, 4)
        split = [k for k, (a, b) in enumerate(zip(edges, edges[1:])) for _ in range(a, b)]
        cs = sorted((rng.randrange(len(t.configs)) for _ in range(K)), key=lambda c: -t.configs[c].dp)
        if sum(t.configs[c].devices for c in cs) > p.n_devices:
            continue
        plan = build_plan(p, space, split, [t.configs[c] for c in cs])
        assert model_objective_s(t, K, split, cs) == pytest.approx(stage_objective_s(p, plan), rel=1e-9)
        seen += 1


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layers=st.integers(1, 3), shape=st.sampled_from([(1, 2), (2, 1), (1, 4), (2, 2)]),
       M=st.sampled_from([1, 2, 4]), seq=st.sampled_from([32, 128]), mem=st.sampled_from([None, 1.5e8, 3e8]))
@example(layers=2, shape=(2, 2), M=4, seq=32, mem=1.5e8)   # 16 refusals before the plan the checker takes
def test_milp_optimum_equals_the_brute_force_of_the_declared_space(layers, shape, M, seq, mem):
    """Up to 2 stages: the MILP (memory rows, then the checker cutting off what it
    refuses) reaches the least objective over every feasible plan the oracle writes out."""
    p = _problem(layers, *shape, M, seq, mem)
    _assert_milp_reaches(p, stage_optimum(p, "bf16", max_stages=2), _Space(p, "bf16"), ("",))


def _assert_milp_reaches(p, want: float, spaces, recipes) -> None:
    """The MILP over 2 stages at most, its memory rows and the checker's cut-offs, reaches
    ``want`` (inf: no plan fits, and it returns none)."""
    t, _ = undominated(stage_terms(p, spaces, stage_configs(p, recipes=recipes)))
    units = len((spaces[""] if isinstance(spaces, dict) else spaces).units)
    milp = StageMilp(t, min(2, units), p.n_devices)
    sol, got, _ = solve_checked(p, spaces, t, milp, lambda: 60.0, rel_gap=0.0)
    if want == float("inf"):
        assert not got
        return
    # HiGHS's default absolute gap and primal tolerance are 1e-6 in model units (ms): 1e-9 s
    assert got and sol.objective_s == pytest.approx(want, rel=1e-7, abs=2e-9)
    assert objective_lb_s(t, p.n_devices) <= want * (1 + 1e-12)   # the bound that prunes microbatch sizes
    assert stage_objective_s(p, got[0][0]) == pytest.approx(want, rel=1e-7, abs=2e-9)


def test_stage_space_never_loses_to_the_cluster_space():
    """Its candidates include the cluster space's plans (4 layers on 2 nodes of 4)."""
    p = _problem(4, 2, 4, 8)
    res = plan_stages(p, Clock.until(float("inf")), top_k=3)
    assert res.plans[0].iteration_s <= res.cluster_best_s
    assert all(c.iteration_s == pytest.approx(estimate_iteration(c.problem, c.plan).iteration_s) for c in res.plans)
    # every plan the cluster space returns is returned (and so simulated) too: a MILP plan
    # estimated better but simulated worse cannot push the cluster's best out
    cl = plan_cluster(p, top_k=3, clock=Clock.until(float("inf")))
    got = [(c.plan.op_stage, c.plan.stages, c.plan.dp_allreduce, c.plan.overlap_grad_reduce) for c in res.plans]
    assert all((c.plan.op_stage, c.plan.stages, c.plan.dp_allreduce, c.plan.overlap_grad_reduce) in got
               for c in cl.plans)
    assert len(res.plans) <= 2 * 3


def test_solve_reaches_the_stage_space_by_name_and_refuses_inference():
    p = _problem(2, 1, 2, 2)
    rep = distplan.solve(p, SolveOptions(space="stage", time_limit_s=60, top_k=2))
    assert rep.solver.space == "stage" and rep.best.sim.iteration_s > 0
    q = make_problem("gpt3-256x2x4", _topo(1, 2), batch_size=1, seq_len=32, mode="inference",
                     precisions=("bf16",), microbatches=1)
    with pytest.raises(DistplanError, match="stage plan space plans training"):
        distplan.solve(q, SolveOptions(space="stage", objective="latency"))


def _fp8_problem(layers: int, nodes: int, per_node: int, M: int, seq: int, mem: float | None):
    kind = K.H100 if mem is None else dataclasses.replace(K.H100, mem_capacity_bytes=mem)
    topo = rail_cluster(f"tiny-h{nodes}x{per_node}", nodes, per_node, kind, K.NVLINK3_BW_BYTES_PER_S,
                        K.NVLINK_LATENCY_S, K.IB_HDR_PORT_BW_BYTES_PER_S, K.IB_LATENCY_S)
    return make_problem(f"gpt3-256x{layers}x4", topo, batch_size=1, seq_len=seq, mode="training",
                        precisions=("bf16", "fp8"), microbatches=M)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layers=st.integers(1, 3), shape=st.sampled_from([(1, 2), (2, 1), (2, 2)]), M=st.sampled_from([2, 4]),
       seq=st.sampled_from([32, 256]), mem=st.sampled_from([None, 2e8]))
def test_per_stage_fp8_optimum_equals_the_brute_force(layers, shape, M, seq, mem):
    """With fp8 allowed on H100s each stage also chooses its recipe (bf16, or Transformer
    Engine's fp8 linear layers with their weight cast): up to 2 stages, the MILP reaches
    the least objective of the oracle's declared space with a recipe per stage."""
    from distplan.model.cluster import training_recipes
    from distplan.model.stage_terms import mixed_recipes
    p = _fp8_problem(layers, *shape, M, seq, mem)
    recipes = tuple(training_recipes(p))
    assert recipes == ("", "fp8")
    want = stage_optimum(p, "bf16", max_stages=2, recipes=recipes)
    spaces = {"": _Space(p, "bf16"), "fp8": _Space(p, "fp8", "bf16")}
    assert mixed_recipes(p, spaces)
    _assert_milp_reaches(p, want, spaces, recipes)


def test_a_stage_may_run_fp8_while_another_stays_bf16():
    """The plan of a mixed assignment: its fp8 stage's linear layers at fp8, the other
    stage's every op at bf16, and the MILP's objective equal to the oracle's of it."""
    p = _fp8_problem(2, 1, 2, 4, 256, None)
    spaces = {"": _Space(p, "bf16"), "fp8": _Space(p, "fp8", "bf16")}
    from distplan.model.stage_terms import StageConfig
    cfgs = [StageConfig(1, 1, precision="fp8"), StageConfig(1, 1)]
    t = stage_terms(p, spaces, cfgs)
    U = len(spaces[""].units)
    split = [0] * (U // 2) + [1] * (U - U // 2)
    plan = build_plan(p, spaces, split, cfgs)
    on0 = {plan.op_precision[v] for v in plan.ops_in_stage(0)}
    on1 = {plan.op_precision[v] for v in plan.ops_in_stage(1)}
    assert on0 == {"bf16", "fp8"} and on1 == {"bf16"}
    assert model_objective_s(t, 2, split, [0, 1]) == pytest.approx(stage_objective_s(p, plan), rel=1e-9)


def test_identical_layers_form_one_run_and_the_optimum_stays_the_brute_force():
    """6 layers: unit 0 (embedding + layer 0) alone, layers 1-4 one run, the last layer
    with the head alone; the MILP over those runs reaches the oracle's optimum (2 x 2
    GPUs; 2 x 1 at 200 MB, where the memory rows and the checker bind: 0.0042799 s
    against 0.0023407 s unbounded; 4 microbatches)."""
    from distplan.model.stage_milp import unit_runs
    for shape, mem in (((2, 2), None), ((2, 1), 2e8)):
        p = _problem(6, *shape, 4, 32, mem)
        t, _ = undominated(stage_terms(p, _Space(p, "bf16"), stage_configs(p)))
        assert unit_runs(t) == [range(0, 1), range(1, 5), range(5, 6)]
        _assert_milp_reaches(p, stage_optimum(p, "bf16", max_stages=2), _Space(p, "bf16"), ("",))


def test_a_cutoff_below_the_optimum_proves_nothing_lies_below_it():
    """HiGHS's objective_bound prunes the nodes at or above it: below the optimum the
    bound is the cutoff, and whatever comes back is no better than the optimum (HiGHS
    may return its heuristics' solution above the cutoff: 0.1 % below, the optimum; 1 %
    below, 0.0013411 s against the optimum's 0.0012488 s; 10 % below, none, kInfeasible);
    a cutoff above the optimum returns the optimum."""
    p = _problem(4, 2, 2, 4)
    t, _ = undominated(stage_terms(p, _Space(p, "bf16"), stage_configs(p)))
    best = StageMilp(t, 3, p.n_devices).solve(60.0, rel_gap=0.0)
    for f in (0.999, 0.99, 0.9):
        milp = StageMilp(t, 3, p.n_devices)
        got = milp.solve(60.0, rel_gap=0.0, cutoff_s=best.objective_s * f)
        assert milp.bound_s == best.objective_s * f
        assert got is None or (got.objective_s >= best.objective_s * (1 - 1e-9) and got.bound_s == milp.bound_s)
    assert got is None and milp.status == "kInfeasible"
    got = StageMilp(t, 3, p.n_devices).solve(60.0, rel_gap=0.0, cutoff_s=best.objective_s * 1.01)
    assert got.objective_s == pytest.approx(best.objective_s, rel=1e-9)


def test_the_incumbent_across_microbatch_sizes_keeps_the_least_objective():
    """plan_stages solves the sizes against one incumbent (HiGHS's cutoff): its least MILP
    objective equals the least of each size's own optimum, solved alone without one, and
    every size either has a plan or is proven to have none below the cutoff, by HiGHS
    or by its lower bound (objective_lb_s, at most its optimum)."""
    from distplan.model.cluster import batch_variants
    p = _problem(4, 2, 2, 8)
    res = plan_stages(p, Clock.until(float("inf")), top_k=3, microbatch_sizes=(1, 2, 4))
    rows = res.points[1:]
    assert {r["microbatch_size"] for r in rows} == {1, 2, 4}
    alone = []
    for pb in batch_variants(p, (1, 2, 4)).values():
        t, _ = undominated(stage_terms(pb, _Space(pb, "bf16"), stage_configs(pb)))
        sol, got, _ = solve_checked(pb, _Space(pb, "bf16"), t, StageMilp(t, min(4, pb.n_devices), pb.n_devices),
                                    lambda: 60.0, rel_gap=1e-3)
        alone.append(sol.objective_s)
    assert min(r["objective_s"] for r in rows if "objective_s" in r) == pytest.approx(min(alone), rel=1e-3)
    for r, want in zip(sorted(rows, key=lambda r: r["microbatch_size"]), alone):
        assert r["lb_s"] <= want
        assert ("objective_s" in r or (r["status"] == "kInfeasible" and r["bound_s"] == r["cutoff_s"])
                or (r["status"] == "pruned by bound" and r["lb_s"] >= r["cutoff_s"]))


def test_a_milp_left_past_its_limit_says_so_and_is_not_used_again(monkeypatch):
    """A MILP the watched run leaves (past its limit, or a Ctrl-C in a root LP) returns
    no solution, status kTimeLimit (kInterrupt after a stop), and is never run again."""
    from distplan.model import stage_milp
    calls = []
    monkeypatch.setattr(stage_milp, "run_watched", lambda h, stop, at: (calls.append(at) or (False, None)))
    p = _problem(2, 1, 2, 2)
    t, _ = undominated(stage_terms(p, _Space(p, "bf16"), stage_configs(p)))
    milp = StageMilp(t, 2, p.n_devices)
    assert milp.solve(1.0) is None
    assert (milp.status, milp.abandoned, milp.bound_s) == ("kTimeLimit", True, -math.inf)
    assert milp.solve(1.0) is None and len(calls) == 1


def test_a_sizes_row_claims_no_iteration_an_untimed_option_may_beat():
    """``row_iteration``: every option timed, the least; some left out (proven at least
    the K-th's iteration) and the timed ones above that, only the lower bound."""
    from distplan.model.stage_space import reduction_options, row_iteration
    assert row_iteration([(None, 0.30), (None, 0.28)], 2, 0.25) == {"iteration_s": 0.28}
    assert row_iteration([(None, 0.367)], 4, 0.2831) == {"iteration_s": None, "iteration_at_least_s": 0.2831}
    assert row_iteration([(None, 0.27)], 4, 0.2831) == {"iteration_s": 0.27}   # below the cut: the best
    assert row_iteration([], 1, 0.5) == {"iteration_s": None, "iteration_at_least_s": 0.5}
    from distplan.model.stage_terms import StageConfig
    assert len(reduction_options([StageConfig(2, 1), StageConfig(1, 4)])) == 4   # a stage with replicas
    assert reduction_options([StageConfig(8, 1)]) == [("ring", False)]


@pytest.mark.parametrize("layers,shape,M,mem", [(3, (2, 2), 4, None), (2, (1, 4), 4, 3e8), (3, (2, 1), 2, None),
                                                  (2, (2, 2), 8, 1.5e8)])
def test_the_lower_bounds_hold_on_every_assignment_the_milp_may_take(layers, shape, M, mem):
    """objective_lb_s <= every assignment's objective, and config_lb_s[c] <= that of every
    assignment with a stage at c (the bound that leaves c out of a MILP), over all
    assignments of up to 3 stages within the device budget, dp non-increasing, memory
    rows kept, enumerated (the MILP's own objective, model_objective_s)."""
    import itertools
    import numpy as np
    from distplan.model.stage_milp import config_lb_s, model_memory_bytes
    p = _problem(layers, *shape, M, 32, mem)
    t, _ = undominated(stage_terms(p, _Space(p, "bf16"), stage_configs(p)))
    C, U = t.fwd.shape
    lb, per = objective_lb_s(t, p.n_devices), config_lb_s(t, p.n_devices)
    least = np.full(C, np.inf)
    for K in range(1, min(3, U) + 1):
        for cut in itertools.combinations(range(1, U), K - 1):
            edges = (0, *cut, U)
            split = [k for k, (a, b) in enumerate(zip(edges, edges[1:])) for _ in range(a, b)]
            for cs in itertools.product(range(C), repeat=K):
                if (sum(t.configs[c].devices for c in cs) > p.n_devices
                        or any(t.configs[a].dp < t.configs[b].dp for a, b in zip(cs, cs[1:]))
                        or (model_memory_bytes(t, K, split, cs) > t.cap_bytes).any()):
                    continue
                o = model_objective_s(t, K, split, list(cs))
                for c in set(cs):
                    least[c] = min(least[c], o)
    assert np.isfinite(least).any()
    assert lb <= least.min() * (1 + 1e-12)
    assert (per <= least * (1 + 1e-12)).all()
