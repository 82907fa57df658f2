"""Tensor-parallel communication overlap (``Stage.tp_comm_overlap``, ``costs.tp_overlap``):
one layer's exposed seconds by hand on 2-8 devices, simulator = analytic with the option,
memory unchanged, the plan file round trip, the checker's refusals, the what-if CLI."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import distplan
from distplan.api.configs import whatif
from distplan.cli.replay import main as sim_main
from distplan.core.errors import DistplanError
from distplan.core.plan import Plan, Stage, plan_from_dict, plan_to_dict
from distplan.costs.check import plan_violations
from distplan.costs.collectives import ring_allreduce_s
from distplan.costs.evaluate import plan_memory_bytes
from distplan.costs.iteration import estimate_iteration
from distplan.costs.tp_overlap import COLLECTIVE_SM_SHARE, overlapped_s, slowed_gemm_s
from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.workloads.graph import Graph, Operator, Tensor
from test_sim_tp_megatron import _layer  # its one-layer graph (inp, col, act, row, add)

# 1 TFLOP/s fp16 at full efficiency, no launch cost, memory traffic free: time = flops / 1e12
KIND = DeviceKind("k", {"fp16": 1e12}, mem_capacity_bytes=1e12, mem_bw_bytes_per_s=1e18, efficiency=1.0)
MS = 1e-3


def _ring(n: int, bw: float = 1e6) -> Topology:
    """n devices, a link i -> i+1 (and back, for two) of ``bw`` bytes/s, no latency."""
    devs = tuple(Device(f"d{i}", "k") for i in range(n))
    pairs = [(i, (i + 1) % n) for i in range(n)] if n > 2 else [(0, 1), (1, 0)]
    return Topology(f"ring{n}", {"k": KIND}, devs, tuple(Link(f"d{a}", f"d{b}", bw) for a, b in pairs))


def _case(n: int, overlap: bool, mode: str = "training", schedule: str = "1f1b", sp: bool = True, M: int = 1):
    p = distplan.problem(_layer(mode), _ring(n), precisions="fp16", microbatches=M, schedule=schedule)
    st = Stage(tuple(range(n)), n, sequence_parallel=sp, tp_comm_overlap=overlap)
    return p, Plan((0,) * 5, ("fp16",) * 5, (st,), M, schedule)


def _ring_ms(n: int, nbytes: float) -> float:
    """A ring all-reduce of ``nbytes`` over n devices at 1 MB/s, in ms: 2(n-1) steps of bytes/n."""
    return 2 * (n - 1) * nbytes / n / 1e6 / MS


#: per tp degree n: (row's forward GEMM, col's backward GEMM, one 2,000-byte all-reduce) in
#: ms, and the exposed part of each collective pipelined in n chunks,
#: max(0, c - g) + min(c, g) / n (no latency), worked out by hand, plus where the GEMM's
#: rest g (n-1)/n outlasts the first n-1 chunks' collective c (n-1)/n the SMs that
#: collective takes (share s = 16/132): s c (n-1)/n. Only n = 2's backward has it (rest
#: 2 ms beside 1 ms); elsewhere the slowed rest, g (n-1)/n / (1 - s), stays under c (n-1)/n
SHARE = 16 / 132
HAND = {2: ((1.0, 4.0, 2.0), 1.0 + 0.5, 0.0 + 1.0 + SHARE * 1.0),
        4: ((0.5, 2.0, 3.0), 2.5 + 0.125, 1.0 + 0.5),
        8: ((0.25, 1.0, 3.5), 3.25 + 0.03125, 2.5 + 0.125)}


@pytest.mark.parametrize("n", [2, 4, 8])
def test_one_layer_exposes_only_the_collective_past_its_gemm_plus_one_chunk(n):
    (g_f, g_b, c), fwd_exposed, bwd_exposed = HAND[n]
    assert (g_f, g_b, c) == pytest.approx((2e9 / n / 1e9, 8e9 / n / 1e9, _ring_ms(n, 2000)), rel=1e-12)
    # serial: every op's share (sequence parallelism shards inp and add too) plus the two all-reduces
    fwd = (1e6 + 4e9 + 1e9 + 2e9 + 1e6) / n / 1e9 + c
    bwd = (1e6 + 8e9 + 2e9 + 4e9 + 1e6) / n / 1e9 + c
    plain, piped = _case(n, False), _case(n, True)
    a, b = distplan.simulate(*plain), distplan.simulate(*piped)
    assert a.makespan_s == pytest.approx((fwd + bwd) * MS, rel=1e-12)
    saved = (c - fwd_exposed) + (c - bwd_exposed)
    assert b.makespan_s == pytest.approx((fwd + bwd - saved) * MS, rel=1e-12)
    # the analytic iteration charges the same seconds
    assert estimate_iteration(*plain).iteration_s == pytest.approx(a.iteration_s, rel=1e-9)
    assert estimate_iteration(*piped).iteration_s == pytest.approx(b.iteration_s, rel=1e-9)
    # forward only (inference): the row-parallel layer's collective alone
    fa = distplan.simulate(*_case(n, False, "inference", "stream"))
    fb = distplan.simulate(*_case(n, True, "inference", "stream"))
    assert fa.makespan_s - fb.makespan_s == pytest.approx((c - fwd_exposed) * MS, rel=1e-9)


def test_the_rule_is_the_fill_of_a_two_stage_pipeline():
    p, _ = _case(4, True)
    G = [0, 1, 2, 3]

    def ring(nbytes: float) -> float:
        return ring_allreduce_s(p, G, nbytes)

    for g, nbytes in ((0.5e-3, 2000.0), (2e-3, 2000.0), (1e-3, 8000.0), (4e-3, 0.0)):
        c = ring(nbytes)
        assert overlapped_s(g, nbytes, 4, ring) == pytest.approx(max(g, c) + min(g, c) / 4, rel=1e-12)
        assert overlapped_s(g, nbytes, 4, ring) <= g + c * (1 + 1e-12)   # never slower without latency
    # a GEMM longer than its collective runs slower by the SMs the first 3 chunks' ring takes
    g, c = 4e-3, ring(2000.0)
    assert c == pytest.approx(3e-3, rel=1e-12)
    assert overlapped_s(g, 2000.0, 4, ring) == pytest.approx(g + SHARE * 0.75 * c + c / 4, rel=1e-12)
    assert COLLECTIVE_SM_SHARE == SHARE and slowed_gemm_s(1.0, 10.0) == pytest.approx(1 / (1 - SHARE), rel=1e-12)


def test_several_microbatches_and_recomputation_stay_equal_to_the_analytic_iteration():
    for rc in ("none", "full"):
        p, plan = _case(4, True, M=4)
        plan = dataclasses.replace(plan, stages=(dataclasses.replace(plan.stages[0], recompute=rc),))
        sim, est = distplan.simulate(p, plan), estimate_iteration(p, plan)
        assert est.iteration_s == pytest.approx(sim.iteration_s, rel=1e-9), rc


@pytest.mark.parametrize("workload, topology, dp, tp, extra", [
    ("gpt3-256x4x4", "h100x16", 1, 4, dict(recompute="full")),
    ("gpt3-256x4x4", "h100x16", 4, 2, dict(zero=1, overlap_grad_reduce=True)),
    ("gpt3-512x6x8", "dgx-a100", 2, 4, dict(overlap_grad_reduce=True)),
    ("gpt3-512x6x8", "dgx-a100", 1, 8, dict()),
])
def test_whatif_plans_simulate_as_the_analytic_iteration_and_keep_their_memory(workload, topology, dp, tp, extra):
    """One stage: the simulator and the analytic iteration to rounding, with and without
    the option; the peak and the checker's bound unchanged; the simulator's copy of one
    replica and rank (sim.symmetry) times what every device's run times."""
    runs = [whatif(workload, topology, dp, tp, 1, 1, 4 * dp, sequence_parallel=True, tp_comm_overlap=ov,
                   breakdown=False, **extra) for ov in (False, True)]
    for r in runs:
        # overlapped buckets beside pipelined collectives: their link contention is not
        # modelled (docs/concepts/simulator.md), 0.02 % here (dgx-a100 dp 2 x tp 4)
        both = r.plan.overlap_grad_reduce and r.plan.stages[0].tp_comm_overlap
        assert estimate_iteration(r.problem, r.plan).iteration_s == pytest.approx(r.iteration_s,
                                                                                  rel=1e-3 if both else 1e-9)
    off, on = runs
    assert on.plan.stages[0].tp_comm_overlap and not off.plan.stages[0].tp_comm_overlap
    assert on.iteration_s != off.iteration_s
    whole = distplan.simulate(on.problem, on.plan, distplan.SimOptions(symmetry=False))
    assert whole.iteration_s == pytest.approx(on.iteration_s, rel=1e-12)
    assert np.array_equal(on.sim.peak_memory_bytes, off.sim.peak_memory_bytes)
    assert np.array_equal(plan_memory_bytes(on.problem, on.plan), plan_memory_bytes(off.problem, off.plan))


def test_the_plan_file_keeps_the_option_and_older_files_mean_none():
    p, plan = _case(2, True)
    d = plan_to_dict(plan, p)
    assert d["stages"][0]["tp_comm_overlap"] is True
    assert plan_from_dict(d, p) == plan
    _, bare = _case(2, False)
    old = plan_to_dict(bare, p)
    assert "tp_comm_overlap" not in old["stages"][0]
    assert plan_from_dict(old, p).stages[0].tp_comm_overlap is False
    d["stages"][0]["tp_comm_overlap"] = "yes"
    with pytest.raises(DistplanError, match="tp_comm_overlap must be true or false"):
        plan_from_dict(d, p)


def test_the_checker_refuses_tp_1_and_no_sequence_parallelism():
    p = distplan.problem(_layer("training"), _ring(2), precisions="fp16", microbatches=2)
    one = Plan((0,) * 5, ("fp16",) * 5, (Stage((0, 1), 1, sequence_parallel=True, tp_comm_overlap=True),), 2, "1f1b")
    assert any("tensor_parallel 1 has none" in x for x in plan_violations(p, one))
    _, no_sp = _case(2, True, sp=False)
    assert any("needs sequence_parallel" in x for x in plan_violations(p, no_sp))
    assert not plan_violations(*_case(2, True))
    with pytest.raises(DistplanError, match="tensor_parallel 1 has none"):
        whatif("gpt3-256x4x4", "h100x16", 2, 1, 1, 1, 8, tp_comm_overlap=True, breakdown=False)
    with pytest.raises(DistplanError, match="--tp-comm-overlap must be True or False"):
        whatif("gpt3-256x4x4", "h100x16", 1, 2, 1, 1, 8, sequence_parallel=True, tp_comm_overlap="no")


def test_the_cli_takes_the_flag(capsys):
    argv = ["--workload", "gpt3-256x4x4", "--topology", "h100x16", "--dp", "2", "--tp", "2", "--microbatch-size",
            "1", "--global-batch", "8", "--sequence-parallel"]
    assert sim_main(argv + ["--tp-comm-overlap"]) == 0
    on = capsys.readouterr().out
    assert "tp comm overlap" in on.splitlines()[0]
    assert sim_main(argv) == 0
    assert "tp comm overlap" not in capsys.readouterr().out
    assert sim_main(argv[:-1] + ["--tp-comm-overlap"]) != 0   # no sequence parallelism: refused
    assert "needs sequence_parallel" in capsys.readouterr().err
