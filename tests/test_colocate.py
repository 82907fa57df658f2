"""Colocation (graph ``colocate`` groups, issue 24): validated on the Graph, kept by the
graph JSON, fusing and coarsening; refused by the checker when split; honoured by the
MILP, the downset bound and DP, the heuristic and the DP baseline. The optimum of a
tiny chain is compared with an enumeration written here from the rule itself (a
group's ops on one stage), not from the planner."""
from __future__ import annotations

import itertools

import pytest

from distplan.baselines import dp as dp_baseline
from distplan.baselines import annealing, random_search
from distplan.core.errors import DistplanError
from distplan.core.plan import Plan, Stage
from distplan.costs.check import plan_violations
from distplan.costs.problem import ProblemOptions, build_problem
from distplan.model import SolveOptions, solve
from distplan.model.downsets import enumerate_downsets, fixed_precision_plan, relaxation_bound
from distplan.model.heuristic import heuristic_plan
from distplan.topologies.builders import fully_connected
from distplan.topologies.topology import DeviceKind
from distplan.workloads.coarsen import coarsen, expand_plan
from distplan.workloads.colocate import blocked_cuts, units
from distplan.workloads.graph import Graph, Operator, Tensor
from distplan.workloads.io import graph_from_dict, graph_to_dict

KIND = DeviceKind("acc", {"fp16": 1e12}, 1e12, 1e12, 1.0)
TIMES_MS = {"a": 1.0, "b": 3.0, "c": 3.0, "d": 1.0}


def chain(colocate=()) -> Graph:
    """a -> b -> c -> d, 1, 3, 3, 1 ms; the tensors carry nothing (no transfer time)."""
    ops = tuple(Operator(n, "matmul", 1.0, fwd_s=t * 1e-3) for n, t in TIMES_MS.items())
    return Graph("chain4", ops, tuple(Tensor(a, b, 0) for a, b in zip("abc", "bcd")), colocate=colocate)


def problem(colocate=()):
    return build_problem(chain(colocate), fully_connected("fc2", 2, KIND, 1e9, 0.0),
                         ProblemOptions(precisions=("fp16",), microbatches=4))


def brute_force_ms(colocate=()) -> float:
    """Every monotone assignment of the chain to stages 0, 1 with each group on one stage:
    the least largest stage time."""
    names = list(TIMES_MS)
    best = float("inf")
    for stage in itertools.product((0, 1), repeat=4):
        if any(stage[i] > stage[i + 1] for i in range(3)):
            continue
        if any(len({stage[names.index(n)] for n in grp}) > 1 for grp in colocate):
            continue
        best = min(best, max(sum(TIMES_MS[n] for n, k in zip(names, stage) if k == s) for s in (0, 1)))
    return best


def test_the_optimum_splits_the_pair_until_it_is_colocated():
    assert brute_force_ms() == 4.0 and brute_force_ms([("b", "c")]) == 7.0
    opts = SolveOptions(replicas=1, time_limit_s=20)
    free = solve(problem(), opts)
    assert free.objective_s == pytest.approx(4e-3)
    assert free.plans[0].op_stage[1] != free.plans[0].op_stage[2]
    pb = problem((("b", "c"),))
    tied = solve(pb, opts)
    assert tied.status == "optimal" and tied.objective_s == pytest.approx(brute_force_ms([("b", "c")]) * 1e-3)
    assert tied.bound_s == pytest.approx(7e-3, rel=1e-6)
    for plan in tied.plans:
        assert plan.op_stage[1] == plan.op_stage[2] and not plan_violations(pb, plan)


def test_the_dps_never_cut_through_a_group():
    pb = problem((("b", "c"),))
    mat = enumerate_downsets(pb)
    assert all(row[1] == row[2] for row in mat) and len(mat) == 4   # {}, {a}, {a,b,c}, all
    assert relaxation_bound(pb, (0, 1), mat) == pytest.approx(7e-3)
    assert fixed_precision_plan(pb, (0, 1), mat, [0] * 4) in ([0, 1, 1, 1], [0, 0, 0, 1])
    plan, _ = heuristic_plan(pb, (0, 1))
    assert plan.op_stage[1] == plan.op_stage[2]
    assert blocked_cuts(pb.graph) == [False, False, True, False, False]
    res = dp_baseline.search(pb, 2.0)   # its cuts skip the group: no candidate refused
    assert res.plan.op_stage[1] == res.plan.op_stage[2] and res.rejected == 0
    assert res.throughput_per_s == pytest.approx(1 / 7e-3)


def test_random_search_and_annealing_never_draw_a_split_group():
    """Random search draws no cut inside a group, annealing proposes no move that splits
    one: nothing for the checker to refuse, and both reach the 7 ms optimum."""
    pb = problem((("b", "c"),))
    for res in (random_search.search(pb, 5.0, seed=0, max_candidates=40),
                annealing.search(pb, 5.0, seed=0, max_candidates=40)):
        assert res.rejected == 0 and res.plan.op_stage[1] == res.plan.op_stage[2]
        assert res.throughput_per_s == pytest.approx(1 / 7e-3)


def test_a_blind_candidate_that_splits_a_group_is_refused_and_counted():
    """What the grid baseline (Megatron layer splits, blind to groups) would propose."""
    from distplan.baselines.result import Tracker
    from distplan.baselines.space import build_plan
    pb = problem((("b", "c"),))
    tr = Tracker(pb, "grid", 5.0)
    assert tr.evaluate(build_plan(pb, (0, 0, 1, 1), ("fp16",) * 4, (0, 1))) is None and tr.rejected == 1


def test_the_checker_refuses_a_split_group():
    pb = problem((("b", "c"),))
    plan = Plan((0, 0, 1, 1), ("fp16",) * 4, (Stage((0,)), Stage((1,))), 4, "stream")
    bad = plan_violations(pb, plan)
    assert len(bad) == 1 and "colocated ops are split" in bad[0] and "'b' on stage 0" in bad[0]
    assert not plan_violations(problem(), plan)


def test_groups_are_validated_and_merged():
    g = chain((("d", "c"), ("b", "c")))
    assert g.colocate == (("b", "c", "d"),)   # one op in two groups merges them, in topological order
    with pytest.raises(DistplanError, match="names operator 'x', which the graph does not have"):
        chain((("a", "x"),))
    with pytest.raises(DistplanError, match="a group needs at least 2"):
        chain((("a", "a"),))
    with pytest.raises(DistplanError, match="colocate must be a list"):
        chain("ab")


def test_units_close_a_group_over_the_ops_between():
    """a and c colocated: b, on the path between them, shares their stage too."""
    g = chain((("a", "c"),))
    assert units(g) == [[0, 1, 2], [3]]
    assert all(row[0] == row[1] == row[2] for row in enumerate_downsets(problem((("a", "c"),))))


def test_json_round_trip():
    g = chain((("b", "c"),))
    d = graph_to_dict(g)
    assert d["colocate"] == [["b", "c"]]
    assert graph_from_dict(d) == g
    assert "colocate" not in graph_to_dict(chain())
    d["colocate"] = [["b", "nope"]]
    with pytest.raises(DistplanError, match="'nope'"):
        graph_from_dict(d)


def test_coarsening_keeps_the_groups():
    """An 8-op chain, ops 1 and 6 colocated, contracted to 3 ops: the group maps to the
    coarse ops holding its members, and every expanded plan keeps the members together."""
    ops = tuple(Operator(f"o{i}", "matmul", float(1 + i % 3), out_elems=10) for i in range(8))
    g = Graph("c8", ops, tuple(Tensor(f"o{i}", f"o{i + 1}", 10) for i in range(7)), colocate=(("o1", "o6"),))
    c = coarsen(g, 3)
    held = {c.coarse.ops[c.fine_to_coarse[g.index(n)]].name for n in ("o1", "o6")}
    assert len(held) == 1 or c.coarse.colocate == (tuple(sorted(held, key=c.coarse.index)),)
    for k in range(len(c.coarse.ops)):   # any cut of the coarse chain that keeps its group whole
        stage = tuple(0 if i < k else 1 for i in range(len(c.coarse.ops)))
        coarse_plan = Plan(stage, ("fp16",) * len(stage), (Stage((0,)), Stage((1,))), 1, "stream")
        if any(len({stage[c.coarse.index(n)] for n in grp}) > 1 for grp in c.coarse.colocate):
            continue
        fine = expand_plan(c, coarse_plan)
        assert fine.op_stage[1] == fine.op_stage[6]


def test_the_cluster_and_fleet_spaces_merge_the_units_a_group_spans():
    """Ops without layer names are units of their own; a group across two of them makes
    them one unit (and every unit between), so no split the spaces try separates it."""
    from distplan.model.cluster import _layer_units, _units
    pb = problem((("b", "c"),))
    layers, units = _layer_units(pb), _units(pb)
    b, c = pb.graph.index("b"), pb.graph.index("c")
    assert len(units) == len(layers) - 1 and any(b in u and c in u for u in units)
    assert sorted(v for u in units for v in u) == list(range(pb.n_ops))


def test_the_cluster_space_keeps_a_group_inside_a_layer_or_across_layers():
    """The cluster space cuts between units: a group inside layer 1 is never split; a
    group across layers 0 and 1 merges them into one unit, so the space plans on (no
    pipeline cut between them) and every returned plan keeps both groups whole, while a
    hand-built 2-stage Megatron layout (layer 0 | layer 1) splits the second."""
    import dataclasses

    import distplan
    from distplan.costs.megatron import megatron_plan
    from distplan.model.spaces import resolve_space
    from distplan.workloads.zoo import get_workload
    g = get_workload("gpt3-64x2x4", mode="training")
    for groups in ((("l1.qkv", "l1.ffn2"),), (("l0.ffn2", "l1.qkv"),)):
        pb = distplan.problem(dataclasses.replace(g, colocate=groups), "dgx-a100", mode="training", microbatches=8)
        assert resolve_space(pb, SolveOptions()).name == "cluster"
        rep = distplan.solve(pb, distplan.SolveOptions(time_limit_s=30, top_k=2))
        assert rep.solver.path_name == "megatron" and rep.plans
        for r in rep.plans:
            assert not plan_violations(pb, r.plan, memory_bound=False)
            a, b = (pb.graph.index(n) for n in groups[0])
            assert r.plan.op_stage[a] == r.plan.op_stage[b]
        split = plan_violations(pb, megatron_plan(pb, 4, 1, 2, "bf16"))
        assert any("colocated" in x for x in split) == (groups[0][0][:2] != groups[0][1][:2])


def test_a_coarsened_solve_keeps_the_group():
    """Solved on a coarse graph (coarsen_ops), the expanded plan still holds the group."""
    ops = tuple(Operator(f"o{i}", "matmul", 1.0, fwd_s=(1 + i % 3) * 1e-3) for i in range(8))
    g = Graph("c8", ops, tuple(Tensor(f"o{i}", f"o{i + 1}", 0) for i in range(7)), colocate=(("o2", "o5"),))
    pb = build_problem(g, fully_connected("fc2", 2, KIND, 1e9, 0.0), ProblemOptions(precisions=("fp16",)))
    res = solve(pb, SolveOptions(replicas=1, coarsen_ops=4, time_limit_s=20))
    assert all(p.op_stage[2] == p.op_stage[5] and not plan_violations(pb, p) for p in res.plans)


def test_the_sensitivity_budget_search_keeps_the_group():
    """Under a sensitivity budget (the chain DP over downsets, then the MILP): b and c at
    int8 (1.5 ms each) use up the budget; free, the best cut is a, b | c, d (2.5 ms);
    colocated, b and c share a stage with a or d: 1 + 3 = 4 ms."""
    kind = DeviceKind("acc", {"fp16": 1e12, "int8": 2e12}, 1e12, 1e12, 1.0)
    flops = {"a": 1e9, "b": 3e9, "c": 3e9, "d": 1e9}
    for colocate, want_s in (((), 2.5e-3), ((("b", "c"),), 4e-3)):
        ops = tuple(Operator(n, "matmul", f, out_elems=100, touched_elems=100) for n, f in flops.items())
        g = Graph("c4", ops, tuple(Tensor(a, b, 100) for a, b in zip("abc", "bcd")), colocate=colocate)
        pb = build_problem(g, fully_connected("fc2", 2, kind, 1e9, 0.0),
                           ProblemOptions(precisions=("fp16", "int8"), microbatches=4))
        budget = float(pb.sensitivity[1:3, 1].sum())   # int8 on b and c, nowhere else
        res = solve(pb, SolveOptions(replicas=1, time_limit_s=20, sensitivity_budget=budget))
        assert res.status == "optimal" and res.objective_s == pytest.approx(want_s)
        assert all(not plan_violations(pb, p) for p in res.plans)


def _random_case(rng):
    """A random DAG of 2-6 ops (1-9 ms each, no transfer time), 1-2 random groups, 2-3 devices."""
    V, K = rng.randint(2, 6), rng.randint(2, 3)
    names = [f"o{i}" for i in range(V)]
    t_ms = [rng.randint(1, 9) for _ in range(V)]
    edges = [(i, j) for i in range(V) for j in range(i + 1, V) if rng.random() < 0.35]
    groups = [tuple(rng.sample(names, rng.randint(2, min(3, V)))) for _ in range(rng.randint(1, 2))]
    ops = tuple(Operator(n, "matmul", 1.0, fwd_s=t * 1e-3) for n, t in zip(names, t_ms))
    g = Graph("r", ops, tuple(Tensor(names[i], names[j], 0) for i, j in edges), colocate=groups)
    pb = build_problem(g, fully_connected("fc", K, KIND, 1e9, 0.0), ProblemOptions(precisions=("fp16",)))
    best = min(max(sum(t for t, k in zip(t_ms, st) if k == s) for s in range(K))
               for st in itertools.product(range(K), repeat=V)
               if all(st[i] <= st[j] for i, j in edges)
               and all(len({st[names.index(n)] for n in grp}) == 1 for grp in groups))
    return pb, K, best * 1e-3


def test_random_dags_the_downset_dp_and_the_milp_meet_the_enumeration(monkeypatch):
    """The DP over downsets (exact for one precision) equals an enumeration of every
    monotone assignment keeping each group on one stage; so do the full solve and the
    MILP with no downsets (the heuristic's warm start and the colocate rows alone)."""
    import random

    from distplan.model import phase_fast
    rng = random.Random(1)
    for case in range(40):
        pb, K, best_s = _random_case(rng)
        stage = fixed_precision_plan(pb, tuple(range(K)), enumerate_downsets(pb), [0] * pb.n_ops)
        loads = [sum(pb.op_time_s(v, 0, 0) for v in range(pb.n_ops) if stage[v] == s) for s in range(K)]
        assert max(loads) == pytest.approx(best_s), case
        if case < 8:
            res = solve(pb, SolveOptions(replicas=1, time_limit_s=20, rel_gap=0.0))
            assert res.objective_s == pytest.approx(best_s), case
            with monkeypatch.context() as mp:
                mp.setattr(phase_fast, "enumerate_downsets", lambda problem: None)
                res = solve(pb, SolveOptions(replicas=1, time_limit_s=20, rel_gap=0.0))
            assert res.objective_s == pytest.approx(best_s), case
            assert all(not plan_violations(pb, p) for p in res.plans)


def test_describe_names_the_groups():
    from distplan.api.describe import describe
    assert "1 colocate group(s) of 2 ops, each on one stage" in describe(problem((("b", "c"),)))
    assert "colocate" not in describe(problem())


def test_a_plan_file_keeps_the_groups(tmp_path):
    """A plan file embeds the graph with its groups; the replayed problem still refuses a split."""
    from distplan.costs.plan_file import load_plan_file, save_plan
    pb = problem((("b", "c"),))
    plan = Plan((0, 1, 1, 1), ("fp16",) * 4, (Stage((0,)), Stage((1,))), 4, "stream")
    save_plan(plan, pb, tmp_path / "plan.json")
    back, replayed = load_plan_file(tmp_path / "plan.json")
    assert replayed.graph.colocate == (("b", "c"),) and back == plan and not plan_violations(replayed, back)
    split = Plan((0, 0, 1, 1), ("fp16",) * 4, (Stage((0,)), Stage((1,))), 4, "stream")
    assert plan_violations(replayed, split)


def test_the_graph_variants_and_fusion_keep_the_groups():
    """tests/test_fuse.py's chain (mm1, bias, GELU's 3 nodes, a view, mm2 fuse into mm1,
    erf, mm2) with ``bias`` and ``view`` colocated: the bias joins mm1's epilogue and the
    view the GELU kernel, so the group is now mm1's and erf's."""
    import dataclasses

    from distplan.workloads.fuse import fuse_graph
    from tests.test_fuse import _chain
    g = dataclasses.replace(_chain(), colocate=(("bias", "view"),))
    assert g.with_mode("training").colocate == g.colocate == g.with_batch_size(2).colocate
    fused = fuse_graph(g)
    assert [op.name for op in fused.ops] == ["mm1", "erf", "mm2"] and fused.colocate == (("mm1", "erf"),)


def test_exposed_optimum_with_a_random_group_equals_the_oracle():
    """tests/test_comm_exposed.py's oracle (every monotone map and precision the checker
    admits, periods from the exposed rules) on random problems with a random colocate
    group: the solve's optimum equals it (20 examples; 60 passed when written)."""
    import dataclasses

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from distplan.testing.strategies import problems
    from tests.test_comm_exposed import check_against_oracle, exposed

    @settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(problems(mode=st.sampled_from(["inference", "training"]), max_ops=4, max_devices=3,
                    microbatches=st.integers(1, 8)), st.data())
    def run(pb, data):
        names = [op.name for op in pb.graph.ops]
        if len(names) < 2:
            return
        grp = data.draw(st.lists(st.sampled_from(names), min_size=2, max_size=3, unique=True))
        g = dataclasses.replace(pb.graph, colocate=(tuple(grp),))
        check_against_oracle(exposed(build_problem(g, pb.topology, pb.options)))

    run()
