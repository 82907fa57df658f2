"""Megatron's interleaved 1F1B (virtual pipeline stages, Narayanan et al. 2021 section
2.2.2): the device order, the bubble by hand, the plan and its checks, the what-if,
simulator == analytic iteration, and the checker's memory bound over the simulated peak.

Hand cases use a kind with peak 1e12 FLOP/s and efficiency 1 (an op of ``t * 1e12``
FLOPs takes t s) and tensors of no bytes: each of the pp x vp chunks is one op of
forward f and backward b seconds.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from distplan.api.configs import whatif
from distplan.cli.replay import main as sim_main
from distplan.core.errors import DistplanError
from distplan.core.plan import Plan, Stage, plan_from_dict, plan_to_dict
from distplan.core.schedules import interleaved_inflight, interleaved_order, interleaved_warmup
from distplan.costs.check import plan_violations
from distplan.costs.evaluate import plan_memory_bytes
from distplan.costs.iteration import estimate_iteration
from distplan.costs.problem import ProblemOptions, build_problem
from distplan.sim import SimOptions, simulate
from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.workloads.graph import Graph, Operator, Tensor

EXACT = DeviceKind("exact", {"fp16": 1e12}, mem_capacity_bytes=1e15, mem_bw_bytes_per_s=1e12, efficiency=1.0)


def _line(n: int) -> Topology:
    devs = tuple(Device(f"d{i}", "exact") for i in range(n))
    links = []
    for i in range(n - 1):
        links += [Link(f"d{i}", f"d{i + 1}", 1e9, 0.0), Link(f"d{i + 1}", f"d{i}", 1e9, 0.0)]
    return Topology(f"line{n}", {"exact": EXACT}, devs, tuple(links))


def _chunks(pp: int, vp: int, m: int, f: float, b: float):
    """pp x vp one-op chunks (forward f, backward b seconds), chunk c on device c mod pp."""
    K = pp * vp
    ops = tuple(Operator(f"o{i}", "add", f * 1e12, b * 1e12, 0, 1, 0.0) for i in range(K))
    g = Graph("chain", ops, tuple(Tensor(f"o{i}", f"o{i + 1}", 0) for i in range(K - 1)), mode="training")
    pb = build_problem(g, _line(pp), ProblemOptions(precisions=("fp16",), microbatches=m, schedule="1f1b"))
    plan = Plan(tuple(range(K)), ("fp16",) * K, tuple(Stage((c % pp,)) for c in range(K)), m, "interleaved")
    return pb, plan


def test_megatron_order_pp2_vp2():
    # Megatron-LM's forward_backward_pipelining_with_interleaving, worked by hand: rank 0
    # warms up (2-0-1)*2 + (2-1)*2 = 4 forwards, rank 1 2; chunks go in groups of pp
    assert interleaved_order(2, 2, 0, 4) == (
        (0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1),
        (0, 0, 2), (1, 1, 0), (0, 0, 3), (1, 1, 1), (0, 1, 2), (1, 0, 0), (0, 1, 3), (1, 0, 1),
        (1, 1, 2), (1, 1, 3), (1, 0, 2), (1, 0, 3))
    assert interleaved_order(2, 2, 1, 4)[:6] == ((0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 1, 0), (0, 1, 1), (1, 1, 1))
    assert [interleaved_warmup(4, 2, r, 8) for r in range(4)] == [10, 8, 6, 4]
    assert interleaved_warmup(2, 2, 1, 2) == 4   # microbatches == pp: all forwards first
    assert interleaved_inflight(2, 2, 0, 4) == (4, 2) and interleaved_inflight(2, 2, 1, 4) == (3, 1)


@pytest.mark.parametrize("pp,vp,m", [(2, 2, 4), (2, 3, 6), (3, 2, 6), (4, 2, 8), (4, 3, 12), (4, 4, 4)])
def test_order_runs_every_task_once_forward_first(pp, vp, m):
    for rank in range(pp):
        seq = interleaved_order(pp, vp, rank, m)
        assert sorted(seq) == sorted((ph, j, l) for ph in (0, 1) for j in range(vp) for l in range(m))
        pos = {t: i for i, t in enumerate(seq)}
        for j in range(vp):
            for l in range(m):
                assert pos[0, j, l] < pos[1, j, l]
                if j + 1 < vp:   # the forward goes up the chunks, the backward down
                    assert pos[0, j, l] < pos[0, j + 1, l] and pos[1, j + 1, l] < pos[1, j, l]


@pytest.mark.parametrize("pp,vp,m", [(2, 2, 4), (2, 2, 8), (2, 3, 4), (3, 2, 6), (4, 2, 8), (4, 3, 8), (4, 2, 4),
                                     (2, 2, 2)])
@pytest.mark.parametrize("f,b", [(1.0, 2.0), (1.0, 1.0)])
def test_bubble_by_hand(pp, vp, m, f, b):
    """The bubble shrinks by 1/vp: with chunk times f + b and free transfers the step is
    (m + (pp - 1) / vp) x vp (f + b) (Narayanan et al. 2021, section 2.2.2), exactly; pp 2,
    vp 2, m 4, f 1, b 2: 27 s (worked by hand on Megatron's order), where 1F1B on the same
    devices (two stages of 2 + 4 s) takes (m + pp - 1) x 6 = 30 s."""
    pb, plan = _chunks(pp, vp, m, f, b)
    assert plan.pipeline_ranks == pp and plan.virtual_stages == vp and not plan_violations(pb, plan)
    r = simulate(pb, plan)
    want = (m + (pp - 1) / vp) * vp * (f + b)
    assert r.makespan_s == pytest.approx(want, rel=1e-12)
    assert r.iteration_s == pytest.approx(want, rel=1e-12)
    assert simulate(pb, plan, SimOptions(ideal=True)).makespan_s == pytest.approx(want, rel=1e-12)
    assert estimate_iteration(pb, plan).iteration_s == pytest.approx(want, rel=1e-12)
    one = Plan(tuple(c // vp for c in range(pp * vp)), plan.op_precision, tuple(Stage((k,)) for k in range(pp)), m,
               "1f1b")
    assert simulate(pb, one).makespan_s == pytest.approx((m + pp - 1) * vp * (f + b), rel=1e-12)


def test_plan_round_trips_and_is_checked():
    pb, plan = _chunks(2, 2, 4, 1.0, 2.0)
    back = plan_from_dict(json.loads(json.dumps(plan_to_dict(plan, pb))), pb)
    assert back == plan and back.virtual_stages == 2
    odd = Plan(plan.op_stage, plan.op_precision, plan.stages, 5, "interleaved")
    assert any("multiple of pp 2" in x for x in plan_violations(pb, odd))
    with pytest.raises(DistplanError, match="multiple of pp"):
        simulate(pb, odd)
    flat = Plan(plan.op_stage, plan.op_precision, tuple(Stage((0,)) for _ in range(4)), 4, "interleaved")
    assert any("pp >= 2" in x for x in plan_violations(pb, flat))
    mixed = Plan(plan.op_stage, plan.op_precision, (Stage((0,)), Stage((1,)), Stage((1,)), Stage((0,))), 4,
                 "interleaved")
    assert plan_violations(pb, mixed)


def test_megatron_layout():
    w = whatif("gpt3-125m", "a100x16", dp=2, tp=2, pp=2, vp=3, global_batch=8, breakdown=False)
    p = w.plan
    assert p.schedule == "interleaved" and p.n_stages == 6 and (p.pipeline_ranks, p.virtual_stages) == (2, 3)
    assert [s.devices for s in p.stages] == [(0, 1, 2, 3), (4, 5, 6, 7)] * 3
    assert [sum(1 for x in p.op_stage if x == c) for c in range(6)][1:5] == [p.op_stage.count(1)] * 4
    with pytest.raises(DistplanError, match="multiple of pp"):
        whatif("gpt3-125m", "a100x16", dp=2, tp=1, pp=4, vp=2, global_batch=4, breakdown=False)
    with pytest.raises(DistplanError, match="--pp >= 2"):
        whatif("gpt3-125m", "a100x16", dp=2, tp=1, pp=1, vp=2, breakdown=False)


def test_vp1_is_todays_1f1b():
    a = whatif("gpt3-1.3b", "a100x16", dp=4, tp=2, pp=2, global_batch=64, breakdown=False)
    b = whatif("gpt3-1.3b", "a100x16", dp=4, tp=2, pp=2, global_batch=64, breakdown=False, vp=1)
    assert b.plan == a.plan and b.plan.schedule == "1f1b"
    assert b.iteration_s == pytest.approx(a.iteration_s, rel=1e-12) == pytest.approx(0.54507, rel=1e-5)
    assert b.peak_memory_bytes == a.peak_memory_bytes and b.bound_memory_bytes == a.bound_memory_bytes


def test_whatif_cli_vp(capsys):
    assert sim_main(["--workload", "gpt3-1.3b", "--topology", "a100x16", "--dp", "4", "--tp", "2", "--pp", "2",
                     "--global-batch", "64", "--vp", "2"]) == 0
    out = capsys.readouterr().out
    assert "pp 2 (vp 2)" in out and "interleaved" in out
    assert sim_main(["--workload", "gpt3-1.3b", "--topology", "a100x16", "--dp", "4", "--pp", "2", "--vp", "0"]) == 2


def test_interleaving_shrinks_the_bubble_and_symmetry_is_exact():
    one = whatif("gpt3-1.3b", "a100x16", dp=4, tp=2, pp=2, global_batch=64, breakdown=False)
    two = whatif("gpt3-1.3b", "a100x16", dp=4, tp=2, pp=2, global_batch=64, breakdown=False, vp=2)
    assert two.iteration_s < one.iteration_s
    full = simulate(two.problem, two.plan, SimOptions(symmetry=False))
    assert full.iteration_s == two.sim.iteration_s
    assert np.array_equal(full.peak_memory_bytes, two.sim.peak_memory_bytes)


_CONFIGS = st.tuples(st.sampled_from(["gpt3-125m", "gpt3-512x6x8"]), st.sampled_from([1, 2]), st.sampled_from([2, 3]),
                     st.sampled_from([2, 3]), st.sampled_from([1, 2]), st.sampled_from([1, 2]),
                     st.sampled_from(["none", "selective", "full"]), st.booleans())


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_CONFIGS)
def test_simulator_equals_analytic(cfg):
    """Random small interleaved plans: the analytic iteration replays the simulator's run
    (costs.iteration._JointNet in Megatron's order): exact without tensor parallelism,
    within 0.1 % with it (its all-reduces timed in closed form)."""
    w, dp, pp, vp, tp, groups, rc, overlap = cfg
    assume(dp * tp * pp <= 16 and pp * vp <= 6)
    r = whatif(w, "a100x16", dp=dp, tp=tp, pp=pp, vp=vp, global_batch=dp * pp * groups, recompute=rc,
               overlap_grad_reduce=overlap and dp > 1, check_memory=False, breakdown=False)
    est = estimate_iteration(r.problem, r.plan).iteration_s
    assert est == pytest.approx(r.iteration_s, rel=1e-9 if tp == 1 else 1e-3)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_CONFIGS, st.booleans(), st.booleans())
def test_checker_bounds_the_simulated_peak(cfg, sp, zero):
    """The checker walks Megatron's order (costs.evaluate.interleaved_held_bytes): the
    simulated peak never exceeds it, and it stays within 5 % of the peak."""
    w, dp, pp, vp, tp, groups, rc, _ = cfg
    assume(dp * tp * pp <= 16 and pp * vp <= 6)
    r = whatif(w, "a100x16", dp=dp, tp=tp, pp=pp, vp=vp, global_batch=dp * pp * groups, recompute=rc,
               sequence_parallel=sp and tp > 1, zero=int(zero and dp > 1), check_memory=False, breakdown=False)
    used = sorted({d for s in r.plan.stages for d in s.devices})
    bound, peak = plan_memory_bytes(r.problem, r.plan)[used], r.sim.peak_memory_bytes[used]
    assert (peak <= bound * (1 + 1e-9)).all()
    assert (bound <= 1.05 * peak).all()   # 4.6 % at most over 891 such plans


def test_an_interleaved_rank_keeps_its_stashes_as_its_order_runs():
    """Rank 1 of pp 2 x vp 2, 4 microbatches: chunk 0 keeps 3 B a microbatch (5 B while it
    runs), chunk 1 keeps 2 B (6 B). Over Megatron's order F0 F0 F1 B1 F1 B1 F0 B0 F0 B0 ...
    the most held is 12 B (two chunk-0 stashes beside a running chunk-1 microbatch, or
    three beside a running chunk-0 one: 9 - 3 + 5 = 11); charging each chunk its own most
    in flight (3 and 1) at once gave 3 x 3 + 1 x 2 + (6 - 2) = 15 B."""
    from distplan.core.schedules import interleaved_inflight
    from distplan.costs.evaluate import interleaved_held_bytes
    from distplan.costs.memory import StageMemory
    chunks = {0: StageMemory(3, 5, 0, 0, 0), 1: StageMemory(2, 6, 0, 0, 0)}
    assert interleaved_inflight(2, 2, 1, 4) == (3, 1)
    assert interleaved_held_bytes(2, 2, 1, chunks, 4) == 12


def test_early_arrivals_follow_the_neighbouring_ranks_orders():
    """pp 2 x vp 2, 4 microbatches, rank 1 (orders: rank 0 F0.0 F0.1 F1.0 F1.1 F0.2 B1.0
    F0.3 B1.1 ...; rank 1 F0.0 F0.1 F1.0 B1.0 F1.1 ...). While rank 1 runs F0.0, rank 0
    can have run F0.0 and F0.1 (its F1.0 needs rank 1's F0.0): one early chunk-0 input.
    While it runs F1.1, rank 0 can have run up to F0.3 (its B1.1 needs rank 1's B1.1):
    two early chunk-0 inputs (F0.2, F0.3), and B1.0's gradient for rank 1's B0.0."""
    from distplan.core.schedules import interleaved_early, interleaved_order
    order = interleaved_order(2, 2, 1, 4)
    early = interleaved_early(2, 2, 1, 4)
    assert order[0] == (0, 0, 0) and early[0] == ((1, 0), (0, 0))
    assert order[1] == (0, 0, 1) and early[1] == ((0, 1), (0, 0))   # rank 0's F1.0 is done
    assert order[4] == (0, 1, 1) and early[4] == ((2, 0), (1, 0))
    assert early[-1] == ((0, 0), (0, 0))
    assert all(a >= 0 for e in early for part in e for a in part)
