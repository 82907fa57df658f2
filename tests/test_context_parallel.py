"""Context parallelism (``--cp``) and flash attention (``--attention``): hand-worked
figures on 2-4 devices, simulator == analytic, memory never above the checker.

The hand cases run gpt3-64x2x4 (hidden 64, 4 heads of 16, 2 layers) at sequence 256 on
a kind of 1e12 FLOP/s at efficiency 1, no launch overhead and a memory bandwidth that
never binds, so an op of F FLOPs takes F / 1e12 s and a ring step of n bytes on 1e9 B/s
links n / 1e9 s.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distplan.api.configs import whatif
from distplan.cli.replay import main as sim_main
from distplan.core.errors import DistplanError
from distplan.costs.context_parallel import cp_groups, exposed_ring_s
from distplan.costs.evaluate import plan_memory_bytes
from distplan.costs.iteration import estimate_iteration
from distplan.costs.memory import held_per_op_bytes
from distplan.topologies.builders import ring
from distplan.topologies.topology import DeviceKind
from distplan.workloads.zoo import get_workload

EXACT = DeviceKind("exact", {"bf16": 1e12}, mem_capacity_bytes=1e12, mem_bw_bytes_per_s=1e30, efficiency=1.0)
BW = 1e9
MODEL, SEQ = "gpt3-64x2x4", 256


def _op(graph, name):
    return graph.op(name)


def test_flash_attention_by_hand():
    """cp 2: 128 local queries against 256 keys, causal: 128 x 257 / 2 pairs a head."""
    g = get_workload(MODEL, 1, SEQ, "training", "flash", 2)
    op = _op(g, "l0.flash_attn")
    pairs = 128 * 257 / 2
    assert op.fwd_flops == 2 * pairs * 4 * (16 + 16)          # QK^T and PV, 4 heads of 16
    assert op.bwd_flops == 2.5 * op.fwd_flops                  # the scores recomputed
    assert op.out_elems == 128 * 64 + 128 * 4 * 2              # context, then the fp32 log-sum-exp
    assert g.seq_len == 128 and len(g.ops) == 10 * 2 + 3       # score/softmax/context fused away
    assert op.tp_role == "sharded" and op.kind == "attn_context"


def test_explicit_attention_scores_are_local_queries_against_all_keys():
    g = get_workload(MODEL, 1, SEQ, "training", "explicit", 2)
    assert _op(g, "l0.attn_score").fwd_flops == 2 * 4 * 128 * 256 * 16
    assert _op(g, "l0.softmax").out_elems == 4 * 128 * 256
    one = get_workload(MODEL, 1, SEQ, "training")
    assert _op(one, "l0.attn_score").fwd_flops == 2 * _op(g, "l0.attn_score").fwd_flops


def test_flash_keeps_its_inputs_output_and_log_sum_exp():
    """What the checker holds for the flash op's backward: Q, K, V (its input) and the
    log-sum-exp it does not send; its context is held by proj, its reader (with proj's
    1-byte dropout mask: GPT-3 trains with dropout; flash regenerates its own)."""
    w = whatif(MODEL, ring("r2", 2, EXACT, BW, 0.0), dp=1, tp=1, pp=1, global_batch=1, seq_len=SEQ, cp=2)
    p = w.problem
    held = held_per_op_bytes(p, [0] * p.n_ops, 1, False, np.zeros(p.n_ops, dtype=bool))
    v = p.graph.index("l0.flash_attn")
    assert held[v] == 2 * (128 * (64 + 2 * 64) + 128 * 4 * 2)
    assert held[p.graph.index("l0.proj")] == 2 * 128 * 64 + 128 * 64


def test_ring_exposure_by_hand():
    """cp 2 on two devices: a K/V chunk is 128 tokens x 4 heads x (16 + 16) bf16 =
    32,768 B, one 1e9 B/s hop; the flash op's forward computes half its 4.21 us per
    step, so it takes c + x = C/2 + 32.768 us; the backward passes twice the bytes."""
    w = whatif(MODEL, ring("r2", 2, EXACT, BW, 0.0), dp=1, tp=1, pp=1, global_batch=1, seq_len=SEQ, cp=2,
               check_memory=False)
    p, v = w.problem, w.problem.graph.index("l0.flash_attn")
    C = 2 * (128 * 257 / 2) * 4 * 32 / 1e12
    x = 128 * 4 * 32 * 2 / BW
    assert p.fwd_time_s[v, 0, 0] == pytest.approx(C / 2 + x, rel=1e-12)
    assert p.bwd_time_s[v, 0, 0] == pytest.approx(2.5 * C / 2 + 2 * x, rel=1e-12)
    assert exposed_ring_s(C, x, 2) == pytest.approx(x - C / 2, rel=1e-12)
    assert w.ring_exposed_s == pytest.approx((x - C / 2, 2 * x - 2.5 * C / 2), rel=1e-9)
    assert "K/V ring         exposed 0.03066 ms forward, 0.06027 ms backward" in w.table()
    fast = whatif(MODEL, ring("r2", 2, EXACT, 1e18, 0.0), dp=1, tp=1, pp=1, global_batch=1, seq_len=SEQ, cp=2,
                  check_memory=False)
    assert fast.problem.fwd_time_s[v, 0, 0] == pytest.approx(C, rel=1e-12)   # hidden behind the compute
    assert fast.ring_exposed_s == (0.0, 0.0)
    # the breakdown: the ring's exposed part is communication (free links hide it), not compute
    assert w.compute_share * w.iteration_s == pytest.approx(fast.compute_share * fast.iteration_s, rel=1e-12)
    assert w.compute_share + w.exposed_comm_share + w.bubble_share == pytest.approx(1.0)


def test_all_gather_by_hand():
    """Llama 3's all-gather: nothing overlapped. cp 4 on a 4-device ring, one 1e9 B/s hop
    a step: the gather is 3 steps of a 64-token chunk (64 x 4 x 32 bf16 = 16,384 B),
    the backward gathers again and reduce-scatters dK/dV (3 more steps)."""
    w = whatif(MODEL, ring("r4", 4, EXACT, BW, 0.0), dp=1, tp=1, pp=1, global_batch=1, seq_len=SEQ, cp=4,
               cp_comm="all_gather", check_memory=False)
    x = 64 * 4 * 32 * 2 / BW
    assert w.ring_exposed_s == pytest.approx((3 * x, 6 * x), rel=1e-9)
    assert "(cp 4, all-gathered, not overlapped)" in w.table() and w.to_json()["cp_comm"] == "all_gather"
    p2p = whatif(MODEL, ring("r4", 4, EXACT, BW, 0.0), dp=1, tp=1, pp=1, global_batch=1, seq_len=SEQ, cp=4,
                 check_memory=False)
    C = 2 * (64 * 257 / 2) * 4 * 32 / 1e12   # the ring hides a quarter of the core a step
    assert p2p.ring_exposed_s == pytest.approx((3 * (x - C / 4), 3 * (2 * x - 2.5 * C / 4)), rel=1e-9)
    with pytest.raises(DistplanError, match="--cp-comm 'a2a' unknown"):
        whatif(MODEL, "dgx-a100", dp=1, tp=1, pp=1, cp=2, cp_comm="a2a")


def test_exposure_is_zero_when_the_compute_hides_the_ring_and_linear_past_it():
    assert exposed_ring_s(8.0, 1.0, 4) == 0.0
    assert exposed_ring_s(8.0, 3.0, 4) == pytest.approx(3 * (3.0 - 2.0))


@pytest.mark.parametrize("order,want", [
    ("tp-dp-pp", [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11], [12, 14], [13, 15]]),
    ("tp-pp-dp", [[0, 2], [1, 3], [8, 10], [9, 11], [4, 6], [5, 7], [12, 14], [13, 15]]),
])
def test_cp_groups_sit_next_to_tensor_parallelism(order, want):
    """dp 2 x cp 2 x tp 2 x pp 2: Megatron's tp-cp-dp-pp and Llama 3's tp-cp-pp-dp."""
    w = whatif(MODEL, "a100x16", dp=2, tp=2, pp=2, global_batch=4, seq_len=SEQ, cp=2, order=order,
               breakdown=False)
    assert cp_groups(w.plan, 2) == want
    assert w.plan.stages[0].replicas == 4 and w.plan.microbatches == 8


@pytest.mark.parametrize("kw", [
    dict(dp=1, tp=1, pp=1, cp=2),
    dict(dp=1, tp=2, pp=1, cp=2, attention="explicit"),
    dict(dp=2, tp=1, pp=2, cp=2, recompute="full", zero=1),
    dict(dp=1, tp=2, pp=2, cp=2, sequence_parallel=True, recompute="selective"),
    dict(dp=1, tp=1, pp=2, cp=4, order="tp-pp-dp"),
    dict(dp=1, tp=1, pp=2, cp=2, vp=2, global_batch=4),
])
def test_simulator_equals_analytic_and_memory_stays_under_the_checker(kw):
    """Exact with one stage; with pipelines on a ring the analytic model leaves out the
    boundary sends' contention with the gradient rings, as without cp (0.1-0.8 % here;
    the repo-wide bound is 4 %, tests/test_costs_iteration.py)."""
    kw = {"global_batch": 2 * kw["dp"], **kw}
    w = whatif("gpt3-64x4x4", ring("r8", 8, EXACT, BW, 1e-6), seq_len=SEQ, breakdown=False, **kw)
    est = estimate_iteration(w.problem, w.plan).iteration_s
    assert est == pytest.approx(w.iteration_s, rel=1e-9 if kw["pp"] == 1 else 0.01)
    used = sorted({d for s in w.plan.stages for d in s.devices})
    assert np.all(w.sim.peak_memory_bytes[used] <= plan_memory_bytes(w.problem, w.plan)[used] * (1 + 1e-9))


def test_cp_keeps_the_model_flops_and_splits_the_activations():
    """cp 2 doubles the devices for the same step: the same model FLOPs (causal pairs
    split evenly), each rank half the tokens, so a smaller peak."""
    one = whatif("gpt3-125m", "dgx-a100", dp=1, tp=1, pp=1, global_batch=2, seq_len=1024, attention="flash")
    two = whatif("gpt3-125m", "dgx-a100", dp=1, tp=1, pp=1, global_batch=2, seq_len=1024, cp=2)
    assert two.model_tflops_per_device * 2 * two.iteration_s == pytest.approx(
        one.model_tflops_per_device * one.iteration_s, rel=1e-12)
    assert two.peak_memory_bytes < one.peak_memory_bytes
    assert "dp 1 x cp 2 x tp 1 x pp 1 = 2 devices" in two.table() and "flash attention" in two.table()
    j = two.to_json()
    assert (j["dp"], j["cp"], j["attention"], j["microbatches"]) == (1, 2, "flash", 2)


def test_cli_runs_cp_2(capsys):
    assert sim_main(["--workload", "gpt3-125m", "--topology", "dgx-a100", "--dp", "2", "--cp", "2", "--tp", "2",
                     "--seq-len", "1024", "--global-batch", "4"]) == 0
    assert "dp 2 x cp 2 x tp 2 x pp 1 = 8 devices" in capsys.readouterr().out


@pytest.mark.parametrize("argv,needle", [
    (["--cp", "3"], "--cp 3 does not divide the sequence length 1024"),
    (["--cp", "0"], "--cp must be >= 1"),
    (["--cp", "4", "--dp", "2", "--tp", "2"], "dp 2 x cp 4 x tp 2 x pp 1 = 16 devices"),
    (["--cp", "2", "--workload", "mlp-small"], "--cp 2"),
])
def test_bad_cp_arguments_are_one_error_line(capsys, argv, needle):
    base = {"--workload": "gpt3-125m", "--topology": "dgx-a100", "--dp": "1", "--seq-len": "1024"}
    flags = dict(zip(argv[::2], argv[1::2]))
    if flags.get("--workload") == "mlp-small":
        base.pop("--seq-len")
    full = [x for k, v in {**base, **flags}.items() for x in (k, v)]
    assert sim_main(full) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0], err


def test_cp_refuses_a_graph_file_and_bad_values_in_python():
    g = get_workload(MODEL, 1, SEQ, "training")
    with pytest.raises(DistplanError, match="--cp 2"):
        whatif(g, "dgx-a100", dp=1, tp=1, pp=1, cp=2)
    with pytest.raises(DistplanError, match="--cp must be a positive whole number"):
        whatif(MODEL, "dgx-a100", dp=1, tp=1, pp=1, cp=1.5)
    with pytest.raises(DistplanError, match="--attention 'ring' unknown"):
        whatif(MODEL, "dgx-a100", dp=1, tp=1, pp=1, cp=2, attention="ring")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dp=st.sampled_from([1, 2]), cp=st.sampled_from([2, 4]), tp=st.sampled_from([1, 2]), pp=st.sampled_from([1, 2]),
       attention=st.sampled_from(["flash", "explicit"]), recompute=st.sampled_from(["none", "selective", "full"]),
       sp=st.booleans(), zero=st.sampled_from([0, 1]), per_replica=st.integers(1, 4),
       order=st.sampled_from(["tp-dp-pp", "tp-pp-dp"]), bw=st.sampled_from([1e8, 1e10, 1e13]),
       comm=st.sampled_from(["p2p", "all_gather"]))
def test_random_cp_plans_agree_with_the_analytic_model_and_the_checker(dp, cp, tp, pp, attention, recompute, sp, zero,
                                                                      per_replica, order, bw, comm):
    """Random cp plans on 2-32 ring devices: exact at pp 1, within the analytic model's
    contention-free bound with pipelines (4 %, as tests/test_costs_iteration.py); the
    simulated peak never above the checker."""
    w = whatif("gpt3-64x4x4", ring("r32", 32, EXACT, bw, 1e-6), dp=dp, tp=tp, pp=pp, cp=cp, seq_len=SEQ,
               global_batch=dp * per_replica, attention=attention, recompute=recompute,
               sequence_parallel=sp and tp > 1, zero=zero, order=order, cp_comm=comm, breakdown=False)
    est = estimate_iteration(w.problem, w.plan).iteration_s
    assert est == pytest.approx(w.iteration_s, rel=1e-9 if pp == 1 else 0.04)
    used = sorted({d for s in w.plan.stages for d in s.devices})
    assert np.all(w.sim.peak_memory_bytes[used] <= plan_memory_bytes(w.problem, w.plan)[used] * (1 + 1e-9))
