"""The low-bit policy (issue 14): by default int8/fp8 compute only matrix products, as
int8 inference engines run them; norms, softmax, activations and residual adds stay in
16 bits. ``low_bit_ops="all"`` restores any-op int8. Every planner respects it."""
from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import line_topology
from distplan.api import problem as make_problem
from distplan.baselines import METHODS, analytic_throughput, run_baseline
from distplan.core.errors import DistplanError
from distplan.costs import ProblemOptions, build_problem
from distplan.costs.problem import LOW_BIT_KINDS
from distplan.model import SolveOptions
from distplan.model import solve as milp_solve
from distplan.testing.corpus import load_corpus
from distplan.testing.strategies import graphs, topologies
from distplan.workloads.graph import Graph, Operator, Tensor


def _mixed_chain() -> Graph:
    """matmul -> softmax -> matmul -> layernorm: two ops int8 may compute, two it may not."""
    kinds = ("matmul", "softmax", "matmul", "layernorm")
    ops = tuple(Operator(f"o{i}", k, 1e9, 2e9, 1000 if k == "matmul" else 0, 100, 1e6)
                for i, k in enumerate(kinds))
    return Graph("mixed", ops, tuple(Tensor(f"o{i}", f"o{i + 1}", 100) for i in range(3)))


def test_default_allows_int8_only_on_matrix_products():
    p = make_problem("bert-base", "mcm4x4")
    assert p.low_bit_ops == "matmul"
    q8 = p.q_index("int8")
    for v, op in enumerate(p.graph.ops):
        assert bool(p.op_allowed[v, q8]) == (op.kind in LOW_BIT_KINDS), op.name
        assert p.op_allowed[v, p.q_index("fp16")]
        if op.kind not in LOW_BIT_KINDS:
            assert math.isinf(p.fwd_time_s[v, q8, 0])
    # 12 layers x (4 matmuls + score + context) + the head + the embedding table
    assert int(p.op_allowed[:, q8].sum()) == 74
    assert make_problem("bert-base", "mcm4x4", low_bit_ops="all").op_allowed.all()


def test_fallback_is_the_nearest_higher_fidelity_precision():
    p = build_problem(_mixed_chain(), line_topology(2), ProblemOptions(precisions=("fp32", "fp16", "int8")))
    q32, q16, q8 = (p.q_index(x) for x in ("fp32", "fp16", "int8"))
    assert p.fallback_q(1, q8) == q16        # softmax at int8 -> fp16
    assert p.fallback_q(0, q8) == q8         # matmul keeps int8
    assert p.fallback_q(1, q32) == q32
    assert p.effective_precisions(("int8",) * 4) == ("int8", "fp16", "int8", "fp16")


def test_no_sixteen_bit_format_is_a_clear_error():
    with pytest.raises(DistplanError, match=r"'o1' \(softmax\) may not compute at int8.*--low-bit-ops all"):
        build_problem(_mixed_chain(), line_topology(2), ProblemOptions(precisions=("int8",)))
    p = build_problem(_mixed_chain(), line_topology(2), ProblemOptions(precisions=("int8",), low_bit_ops="all"))
    assert p.op_allowed.all()
    with pytest.raises(DistplanError, match="low_bit_ops must be one of"):
        build_problem(_mixed_chain(), line_topology(2), ProblemOptions(low_bit_ops="some"))


def test_milp_plans_respect_the_policy_and_all_is_never_slower():
    g, topo = _mixed_chain(), line_topology(2)
    strict = build_problem(g, topo, ProblemOptions(microbatches=4))
    loose = build_problem(g, topo, ProblemOptions(microbatches=4, low_bit_ops="all"))
    a = milp_solve(strict, SolveOptions(time_limit_s=30, top_k=3))
    b = milp_solve(loose, SolveOptions(time_limit_s=30, top_k=1))
    for plan in a.plans:
        assert plan.op_precision[1] != "int8" and plan.op_precision[3] != "int8"
    assert b.plans[0].op_precision == ("int8",) * 4   # int8 is faster everywhere when allowed
    assert b.objective_s <= a.objective_s * (1 + 1e-9)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=graphs(max_ops=6, mode="inference"), topo=topologies(max_devices=3),
       method=st.sampled_from(sorted(METHODS)), seed=st.integers(0, 3))
def test_every_baseline_respects_the_policy(g, topo, method, seed):
    if not any(topo.kinds[d.kind].supports(q) for d in topo.devices for q in ("fp16", "int8")):
        return
    try:
        p = build_problem(g, topo, ProblemOptions(precisions=("fp16", "int8"), microbatches=4))
    except DistplanError as e:       # a kind that runs only int8 cannot take a softmax
        assert "may not compute" in str(e) or "supports any of" in str(e)
        return
    r = run_baseline(method, p, 2.0, seed=seed, scorer=analytic_throughput, max_candidates=30)
    if r.plan is not None:
        for v, prec in enumerate(r.plan.op_precision):
            assert p.op_allowed[v, p.q_index(prec)], (g.ops[v].kind, prec)


def test_llama_latency_space_keeps_norms_in_sixteen_bits():
    from distplan.model.cluster import plan_cluster

    p = make_problem("llama-7b", "dgx-h100", mode="inference", batch_size=1, microbatches=1)
    r = plan_cluster(p, time_limit_s=60, top_k=1)
    plan = r.plans[0].plan
    for v, op in enumerate(p.graph.ops):
        if op.kind not in LOW_BIT_KINDS:
            assert plan.op_precision[v] in ("fp16", "bf16"), (op.name, plan.op_precision[v])


def test_corpus_files_without_the_key_mean_all():
    inst = load_corpus()[0]
    assert inst.options.low_bit_ops == "all"
    assert inst.problem().low_bit_ops == "all"
