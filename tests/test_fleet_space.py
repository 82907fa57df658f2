"""The mixed-fleet training space (issue 15): on tiny instances the planner's optimum
equals an exhaustive enumeration written here (device orders, depths, splits, per-op
precision per kind, every share vector, gradient reductions); on hybrid-v100-t4 it beats
the QSync-style plan built by hand; ``--pareto`` is monotone."""
from __future__ import annotations

import itertools
import math

import pytest

import distplan
from distplan.api.pareto import pareto
from distplan.core.plan import Plan, Stage, balanced_shares
from distplan.costs.check import check_plan
from distplan.costs.iteration import estimate_iteration, replica_microbatch_s
from distplan.costs.problem import ProblemOptions, build_problem
from distplan.model import SolveOptions
from distplan.model.spaces import resolve_space
from distplan.model.fleet import plan_fleet
from distplan.sim import simulate
from distplan.testing.strategies import KIND_A, KIND_B
from distplan.topologies.builders import hosts_on_network
from distplan.workloads.graph import Graph, Operator, Tensor

REDUCTIONS = [("ring", True), ("hierarchical", True)]


def _tiny(M: int = 4):
    """3 layers (a matmul and an add each) on 2 x ka + 2 x kb, two hosts."""
    ops, ts = [], []
    for i in range(3):
        ops += [Operator(f"l{i}.mm", "matmul", 4e9 * (i + 1), 8e9 * (i + 1), 200_000, 10_000, 1e5),
                Operator(f"l{i}.add", "add", 1e6, 2e6, 0, 10_000, 2e4)]
    names = [o.name for o in ops]
    ts = [Tensor(a, b, 10_000) for a, b in zip(names, names[1:])]
    g = Graph("tiny3", tuple(ops), tuple(ts), mode="training")
    topo = hosts_on_network("tiny-mixed", [(KIND_A, 2), (KIND_B, 2)], 1e10, 1e-6, 1e9, 1e-5)
    return build_problem(g, topo, ProblemOptions(precisions=("fp16", "int8"), microbatches=M))


def _brute_force(pb) -> float:
    """min estimate_iteration over the declared space, enumerated independently."""
    units = [[2 * i, 2 * i + 1] for i in range(3)]
    by_kind = {}
    for d in range(pb.n_devices):
        by_kind.setdefault(int(pb.device_kind[d]), []).append(d)
    choices = {c: [[q for q in range(2) if pb.supported[q, c] and pb.op_allowed[v, q]] for v in range(pb.n_ops)]
               for c in by_kind}
    best = math.inf
    for perm in itertools.permutations(sorted(by_kind)):
        order = [d for c in perm for d in by_kind[c]]
        for pp in (1, 2):   # divisors of 4 up to the 3 layers
            size = len(order) // pp
            for cuts in itertools.combinations(range(1, 3), pp - 1):
                b = (0, *cuts, 3)
                stage_of = {v: k for k in range(pp) for u in range(b[k], b[k + 1]) for v in units[u]}
                for assign in itertools.product(*(itertools.product(*choices[c]) for c in sorted(by_kind))):
                    qs = dict(zip(sorted(by_kind), assign))
                    stages = []
                    base = [pb.precisions[qs[int(pb.device_kind[order[0]])][v]] for v in range(pb.n_ops)]
                    for k in range(pp):
                        devs = order[k * size:(k + 1) * size]
                        over = tuple({v: pb.precisions[qs[int(pb.device_kind[d])][v]] for v in stage_of
                                      if stage_of[v] == k and pb.precisions[qs[int(pb.device_kind[d])][v]] != base[v]}
                                     for d in devs)
                        stages.append(Stage(tuple(devs), replica_precision=over if any(over) else None))
                    share_sets = []
                    for st in stages:
                        r = st.replicas
                        share_sets.append([tuple(y - x for x, y in zip((0, *c), (*c, pb.microbatches)))
                                           for c in itertools.combinations(range(1, pb.microbatches), r - 1)]
                                          if r > 1 else [None])
                    for shares in itertools.product(*share_sets):
                        sts = tuple(Stage(st.devices, replica_precision=st.replica_precision, shares=s)
                                    for st, s in zip(stages, shares))
                        for ar, ov in REDUCTIONS:
                            plan = Plan(tuple(stage_of[v] for v in range(pb.n_ops)), tuple(base), sts,
                                        pb.microbatches, "1f1b", dp_allreduce=ar, overlap_grad_reduce=ov)
                            best = min(best, estimate_iteration(pb, plan).iteration_s)
    return best


def test_tiny_mixed_optimum_equals_exhaustive_enumeration():
    pb = _tiny()
    r = plan_fleet(pb, top_k=1)
    check_plan(pb, r.plans[0].plan, memory_bound=False)
    assert r.plans[0].iteration_s == pytest.approx(_brute_force(pb), rel=1e-12)
    assert r.bound_s <= r.plans[0].iteration_s


def test_auto_space_is_fleet_for_mixed_training_only():
    pb = _tiny()
    assert resolve_space(pb, SolveOptions()).name == "fleet"
    inf = distplan.problem("mlp-xs", "hybrid-v100-t4")
    assert resolve_space(inf, SolveOptions()).name == "pipeline"


def _qsync(pb) -> Plan:
    """QSync by hand: one stage of all 8 replicas, T4 matrix products at int8, shares by speed."""
    low = {v: "int8" for v, op in enumerate(pb.graph.ops) if op.kind in ("matmul", "attn_score", "attn_context", "head")}
    over = tuple(low if pb.topology.kind_of(d).supports("int8") else {} for d in range(pb.n_devices))
    st = Stage(tuple(range(pb.n_devices)), replica_precision=over)
    plan = Plan((0,) * pb.n_ops, ("fp16",) * pb.n_ops, (st,), pb.microbatches, "1f1b",
                dp_allreduce="hierarchical", overlap_grad_reduce=True)
    t = [replica_microbatch_s(pb, plan, 0, i) for i in range(st.replicas)]
    return Plan(plan.op_stage, plan.op_precision, (Stage(st.devices, replica_precision=over,
                                                          shares=balanced_shares(t, pb.microbatches)),),
                pb.microbatches, "1f1b", dp_allreduce="hierarchical", overlap_grad_reduce=True)


def test_hybrid_bert_base_beats_the_qsync_hand_plan():
    pb = distplan.problem("bert-base", "hybrid-v100-t4", mode="training", batch_size=8, precisions="fp16,int8",
                          microbatches=16)
    r = plan_fleet(pb, top_k=1)
    best = simulate(pb, r.plans[0].plan).iteration_s
    hand = simulate(pb, _qsync(pb)).iteration_s
    assert best < hand
    assert r.bound_s <= r.plans[0].iteration_s


def test_pareto_is_monotone_and_every_point_within_its_budget():
    pb = distplan.problem("mlp-xs", "mcm4x4")
    pts = pareto(pb, 3, SolveOptions(time_limit_s=20, top_k=2))
    assert len(pts) == 3
    assert pts[0].budget == 0 and pts[0].sensitivity == 0
    for a, b in zip(pts, pts[1:]):
        assert a.budget <= b.budget and a.throughput_per_s <= b.throughput_per_s
    for p in pts:
        assert p.sensitivity <= p.budget * (1 + 1e-9) + 1e-12


@pytest.mark.slow
def test_least_sensitivity_meets_the_target_with_the_least_sensitivity():
    """--objective sensitivity: among every plan of the space within the iteration target,
    the chosen one has the least sensitivity (checked against the whole space)."""
    from distplan.model import solve as model_solve

    pb = _tiny()
    every = plan_fleet(pb, top_k=10**9).plans
    fastest = min(f.iteration_s for f in every)
    target = fastest * 1.5
    res = model_solve(pb, SolveOptions(objective="sensitivity", iteration_target="50%", top_k=3,
                                       microbatch_sizes=()))
    within = [f.sensitivity for f in every if f.iteration_s <= target * (1 + 1e-9)]
    assert res.plans[0].predicted["sensitivity"] == pytest.approx(min(within), abs=1e-12)
    assert res.plans[0].predicted["model_iteration_s"] <= target * (1 + 1e-9)
    assert min(within) < min(f.sensitivity for f in every if f.iteration_s == fastest)   # a real trade
    with pytest.raises(distplan.DistplanError, match="iteration.target"):
        model_solve(pb, SolveOptions(objective="sensitivity", iteration_target="fast", microbatch_sizes=()))
