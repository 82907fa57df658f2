"""The fleet space's per-op precision per kind (model.fleet_precision): a hand-worked
instance, the MILP against brute force (distplan.testing.precision_oracle) on random tiny
instances, and the fleet space under a sensitivity budget using it."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from distplan.costs.evaluate import plan_sensitivity
from distplan.costs.problem import ProblemOptions, build_problem
from distplan.model.fleet import plan_fleet
from distplan.model.fleet_precision import Group, choose_precisions, rule_value
from distplan.testing.precision_oracle import all_values, rule_answer
from distplan.testing.strategies import KIND_A, KIND_B
from distplan.topologies.topology import DeviceKind
from distplan.topologies.builders import hosts_on_network
from distplan.workloads.graph import Graph, Operator, Tensor


def _base(n_ops: int = 4, microbatches: int = 4):
    """n matmuls in a chain on one ka and one kb (both run fp16 and int8)."""
    ops = tuple(Operator(f"mm{i}", "matmul", 1e9, 2e9, 1000, 1000, 1e4) for i in range(n_ops))
    ts = tuple(Tensor(a.name, b.name, 1000) for a, b in zip(ops, ops[1:]))
    topo = hosts_on_network("t", [(KIND_A, 1), (KIND_B, 1)], 1e10, 1e-6, 1e9, 1e-5)
    return build_problem(Graph("chain", ops, ts, mode="training"), topo,
                         ProblemOptions(precisions=("fp16", "int8"), microbatches=microbatches))


def _with(pb, time_s: np.ndarray, sens: np.ndarray):
    """``pb`` with per (op, precision, kind) seconds (all forward) and per (op, precision) sensitivity."""
    return dataclasses.replace(pb, fwd_time_s=np.asarray(time_s, dtype=float),
                               bwd_time_s=np.zeros_like(time_s, dtype=float), sensitivity=np.asarray(sens, dtype=float))


def _hand():
    """Stage 0 on kind ka (ops 0, 1), stage 1 on kind kb (ops 2, 3), 4 microbatches.
    ms per microbatch fp16/int8: ka op0 4/2, op1 3/2; kb op2 6/3, op3 5/4; int8 adds
    sensitivity 1, 2, 3, 1 (fp16: 0). Objective = 3 max(t0, t1) + t0 + t1."""
    pb = _base()
    ka, kb = (pb.kind_names.index("ka"), pb.kind_names.index("kb"))
    t = np.zeros((4, 2, len(pb.kind_names)))
    for v, (c, wide, low) in enumerate([(ka, 4, 2), (ka, 3, 2), (kb, 6, 3), (kb, 5, 4)]):
        t[v, 0, :], t[v, 1, :] = 1.0, 1.0     # the other kind's (unused) seconds
        t[v, 0, c], t[v, 1, c] = wide * 1e-3, low * 1e-3
    pb = _with(pb, t, np.array([[0, 1], [0, 2], [0, 3], [0, 1]]))
    return pb, ka, kb, [Group(0, ka, (0, 1), 4, 1.0), Group(1, kb, (2, 3), 4, 1.0)]


@pytest.mark.parametrize("budget, objective_ms, sens, ka_q, kb_q", [
    (None, 32, 7, (1, 1), (1, 1)),    # everything int8: 3 x 7 + 4 + 7
    (3, 39, 3, (0, 0), (1, 0)),       # the whole budget on the slow kind's op2: 3 x 8 + 7 + 8
    (2, 45, 2, (1, 0), (0, 1)),       # one op on each kind: 3 x 10 + 5 + 10
    (0, 51, 0, (0, 0), (0, 0)),       # all fp16: 3 x 11 + 7 + 11
])
def test_hand_worked_choice(budget, objective_ms, sens, ka_q, kb_q):
    pb, ka, kb, groups = _hand()
    got = choose_precisions(pb, groups, 4, budget)
    assert got.objective_s == pytest.approx(objective_ms * 1e-3, rel=1e-12)
    assert got.sensitivity == pytest.approx(sens, abs=1e-12)
    assert got.qs[ka][:2] == ka_q and got.qs[kb][2:] == kb_q


def test_hand_worked_uniform_policies_lose_under_budget_2():
    """One policy per kind (every op wide, or every op int8): within budget 2 only all
    fp16 fits (51 ms); the per-op choice takes 45 ms."""
    pb, ka, kb, groups = _hand()
    uniform = [rule_value(pb, groups, {ka: (a,) * 4, kb: (b,) * 4}, 4) for a in (0, 1) for b in (0, 1)]
    assert min(o for o, s in uniform if s <= 2) == pytest.approx(51e-3)
    assert choose_precisions(pb, groups, 4, 2).objective_s == pytest.approx(45e-3)


@st.composite
def _instances(draw):
    n = draw(st.integers(2, 4))
    M = draw(st.integers(1, 6))
    pb = _base(n, M)
    C = len(pb.kind_names)
    ms = st.floats(0.1, 10.0, allow_nan=False)
    t = np.array([[[draw(ms) * 1e-3 for _ in range(C)] for _ in range(2)] for _ in range(n)])
    s = np.array([[0.0, draw(st.floats(0.0, 5.0))] for _ in range(n)])
    cut = draw(st.integers(0, n - 1))     # 0: one stage
    stages = [tuple(range(n))] if cut == 0 else [tuple(range(cut)), tuple(range(cut, n))]
    groups = []
    for k, ops in enumerate(stages):
        kinds = draw(st.sampled_from([(0,), (1,), (0, 1)]))
        for c in kinds:
            groups.append(Group(k, c, ops, draw(st.integers(1, max(1, M))), draw(st.floats(0.0, 1.0))))
    budget = draw(st.one_of(st.none(), st.floats(0.0, 10.0)))
    return _with(pb, t, s), groups, M, budget


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_instances())
def test_milp_equals_brute_force(inst):
    pb, groups, M, budget = inst
    specs = [(g.stage, g.kind, g.ops, g.share, g.weight) for g in groups]
    if budget is not None:   # no assignment within HiGHS's tolerances of the budget
        assume(all(abs(s - budget) > 1e-6 * max(1.0, budget) for _, s in all_values(pb, specs, M)))
    want = rule_answer(pb, specs, M, budget)
    got = choose_precisions(pb, groups, M, budget)
    if want is None:
        assert got is None
        return
    assert got is not None
    # HiGHS solves to tolerances ~1e-7 of the largest coefficient: the objective within
    # 1e-6 of the least, the sensitivity within 1e-6 of the largest one any assignment has
    s_scale = max(s for _, s in all_values(pb, specs, M))
    assert got.objective_s <= want[0] * (1 + 1e-6)
    assert got.sensitivity <= want[1] + 1e-6 * max(s_scale, 1e-300)
    assert budget is None or got.sensitivity <= budget
    assert (got.objective_s, got.sensitivity) == pytest.approx(rule_value(pb, groups, got.qs, M), rel=1e-12)


def _tiny(M: int = 4):
    """3 layers (a matmul and an add each) on 2 x ka + 2 x kb, two hosts (test_fleet_space's)."""
    ops = []
    for i in range(3):
        ops += [Operator(f"l{i}.mm", "matmul", 4e9 * (i + 1), 8e9 * (i + 1), 200_000, 10_000, 1e5),
                Operator(f"l{i}.add", "add", 1e6, 2e6, 0, 10_000, 2e4)]
    names = [o.name for o in ops]
    g = Graph("tiny3", tuple(ops), tuple(Tensor(a, b, 10_000) for a, b in zip(names, names[1:])), mode="training")
    topo = hosts_on_network("tiny-mixed", [(KIND_A, 2), (KIND_B, 2)], 1e10, 1e-6, 1e9, 1e-5)
    return build_problem(g, topo, ProblemOptions(precisions=("fp16", "int8"), microbatches=M))


@pytest.fixture(scope="module")
def tiny_fastest():
    pb = _tiny()
    return pb, plan_fleet(pb, top_k=1).plans[0]


@pytest.mark.parametrize("frac", [0.0, 0.5])
def test_fleet_space_under_budget_keeps_it(frac, tiny_fastest):
    pb, top = tiny_fastest
    budget = frac * top.sensitivity
    r = plan_fleet(pb, top_k=3, sensitivity_budget=budget)
    for f in r.plans:
        assert f.sensitivity == pytest.approx(plan_sensitivity(pb, f.plan), rel=1e-12)
        assert f.sensitivity <= budget * (1 + 1e-9) + 1e-12
    assert r.plans[0].iteration_s >= top.iteration_s * (1 - 1e-12)


def test_fp8_training_keeps_embedding_head_and_attention_wide():
    """The fp8 recipe (costs.fp8) lowers the linear layers only, though the low-bit
    policy would let embedding, attention and head compute at fp8 too."""
    kf = DeviceKind("kf", {"bf16": 1e12, "fp8": 2e12}, mem_capacity_bytes=1e12, mem_bw_bytes_per_s=1e12)
    ops = (Operator("emb", "embedding", 4e9, 8e9, 1000, 1000, 1e4), Operator("l0.fc", "matmul", 4e9, 8e9, 1000, 1000, 1e4),
           Operator("l0.score", "attn_score", 4e9, 8e9, 1000, 1000, 1e4), Operator("head", "head", 4e9, 8e9, 1000, 1000, 1e4))
    ts = tuple(Tensor(a.name, b.name, 1000) for a, b in zip(ops, ops[1:]))
    topo = hosts_on_network("f", [(kf, 1), (KIND_A, 1)], 1e10, 1e-6, 1e9, 1e-5)
    pb = build_problem(Graph("fp8", ops, ts, mode="training"), topo,
                       ProblemOptions(precisions=("bf16", "fp8"), microbatches=2))
    c = pb.kind_names.index("kf")
    q8 = pb.precisions.index("fp8")
    assert all(pb.op_allowed[v, q8] for v in range(4))   # the policy alone would allow it
    got = choose_precisions(pb, [Group(0, c, (0, 1, 2, 3), 2, 1.0)], 2)
    assert [pb.precisions[q] for q in got.qs[c]] == ["bf16", "fp8", "bf16", "bf16"]


def test_guide_states_the_stored_bench_run():
    """docs/guides/mixed-fleets.md's per-op tables say what
    bench/results/fleet_precision_bench.json holds, and the run met issue 23's targets."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    res = json.loads((root / "bench" / "results" / "fleet_precision_bench.json").read_text())
    text = (root / "docs" / "guides" / "mixed-fleets.md").read_text(encoding="utf-8")
    for wl in ("bert-base", "bert-large"):
        r = res[wl]
        for b in r["budgets"]:
            row = next((ln for ln in text.splitlines() if ln.startswith(f"| {wl} | {b['budget']:g} |")), None)
            assert row is not None, f"the guide has no row for {wl} at budget {b['budget']}"
            assert f"{b['per_op']['per_step_per_s']:,.1f}/s" in row and f"{b['policies']['per_step_per_s']:,.1f}/s" in row
            assert b["per_op"]["per_step_per_s"] >= b["policies"]["per_step_per_s"] * (1 - 1e-9), row
        assert r["per_op"]["per_step_per_s"] >= r["policies"]["per_step_per_s"] * (1 - 1e-9)
        assert f"| {wl} | {r['policies']['per_step_per_s']:,.1f}/s in {r['timing']['policies']['least_s']:.1f} s |" in text
        assert r["pareto"]["distinct"] >= 6
        rates = [p["per_step_per_s"] for p in r["pareto"]["points"]]
        assert rates == sorted(rates), "the frontier is monotone"
