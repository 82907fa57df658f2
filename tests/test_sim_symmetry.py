"""Symmetry reduction (``sim.symmetry``): identical data-parallel replicas and tensor-
parallel ranks simulated once give exactly the full run's figures."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distplan.api.configs import megatron_plan
from distplan.api.problem import problem as make_problem
from distplan.sim import SimOptions, simulate
from distplan.sim.symmetry import find_symmetry

WORKLOAD = "gpt3-256x4x4"   # 4 layers: pp 1, 2 or 4 split them evenly

_PROBLEMS: dict = {}


def _problem(topology: str, M: int, seq: int):
    key = (topology, M, seq)
    if key not in _PROBLEMS:
        _PROBLEMS[key] = make_problem(WORKLOAD, topology, batch_size=1, seq_len=seq, mode="training",
                                      precisions=("bf16",), microbatches=M)
    return _PROBLEMS[key]


def assert_same_run(a, b) -> None:
    """Every figure of two SimResults equal (float sums may differ in the last bits)."""
    for f in ("makespan_s", "period_s", "throughput_per_s", "iteration_s", "step_throughput_per_s",
              "optimizer_s"):
        assert getattr(a, f) == pytest.approx(getattr(b, f), rel=1e-12, abs=1e-15), f
    assert a.steady == b.steady and a.n_tasks == b.n_tasks and a.n_nodes == b.n_nodes
    for f in ("device_busy_s", "link_busy_s", "link_bytes", "peak_memory_bytes", "peak_own_memory_bytes",
              "microbatch_done_s"):
        np.testing.assert_allclose(getattr(a, f), getattr(b, f), rtol=1e-12, atol=1e-15, err_msg=f)


def _both(problem, plan, link_model="fifo"):
    full = simulate(problem, plan, SimOptions(link_model=link_model, symmetry=False))
    red = simulate(problem, plan, SimOptions(link_model=link_model))
    return full, red


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dp=st.sampled_from([1, 2, 4]), tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 4]),
       per_replica=st.integers(1, 5), topology=st.sampled_from(["a100x32", "h100x32", "dgx-a100"]),
       link_model=st.sampled_from(["fifo", "fair", "free"]), recompute=st.sampled_from(["none", "full"]),
       zero=st.sampled_from([0, 1, 3]), overlap=st.booleans(), hier=st.booleans(), sp=st.booleans())
def test_reduced_run_equals_full_run(dp, tp, pp, per_replica, topology, link_model, recompute, zero, overlap,
                                     hier, sp):
    if dp * tp * pp > (8 if topology == "dgx-a100" else 32):
        return
    p = _problem(topology, dp * per_replica, 64)
    plan = megatron_plan(p, dp, tp, pp, "bf16", None, recompute, sp and tp > 1, zero,
                         "hierarchical" if hier else "ring", overlap)
    sym = find_symmetry(p, plan, ideal=False, trace=False)
    if dp * tp > 1 and not (zero == 3 and pp > 1 and dp > 1):   # Megatron layouts on these presets are symmetric: every copy merges, in groups
        # of one node's replicas where a stage spans nodes holding several (dp 4 x tp 4 here); on
        # h100x's rail-optimised fat tree a cross-rail hop goes up the spine, and the groups may be
        # larger (dp 4 x tp 4 there: all four replicas, the tp ranks merged), still exact
        assert sym is not None and sym.factor * sym.group == dp * tp
        if topology != "h100x32":
            assert sym.group == (8 // tp if dp * tp > 8 else 1)
    full, red = _both(p, plan, link_model)
    assert_same_run(red, full)


def test_collapse_happens_and_counts_every_copy():
    p = _problem("a100x64", 8, 64)
    plan = megatron_plan(p, 4, 8, 2, "bf16", None, "none", False, 0, "ring", False)
    sym = find_symmetry(p, plan, ideal=False, trace=False)
    assert sym is not None and (sym.replicas, sym.ranks) == (4, 8)
    assert sym.reduced.microbatches == 2 and all(len(s.devices) == 8 for s in sym.reduced.stages)
    full, red = _both(p, plan)
    assert_same_run(red, full)
    assert red.n_tasks == 2 * p.n_ops * 8 * 8   # F and B of every op, 8 microbatches, 8 ranks


def test_a_ring_mixing_nvlink_and_infiniband_merges_by_node():
    """dp 4 x tp 4 on 8-GPU nodes: two replicas per node, so the gradient ring alternates
    NVLink and InfiniBand hops; shifting replicas by one is not a symmetry, shifting them
    by two (one node) is: one node's two replicas are simulated, the other node repeats
    them, ranks collapse too, and the figures stay exact (more such layouts:
    tests/test_sim_symmetry_nodes.py)."""
    p = _problem("a100x32", 8, 64)
    plan = megatron_plan(p, 4, 4, 2, "bf16", None, "none", False, 0, "ring", False)
    sym = find_symmetry(p, plan, ideal=False, trace=False)
    assert sym is not None and (sym.replicas, sym.group, sym.ranks) == (2, 2, 4)
    full, red = _both(p, plan)
    assert_same_run(red, full)


def test_shared_links_refuse_the_collapse():
    """On a ring of chiplets the replicas' traffic shares links: no reduction, and the
    plan is simulated in full."""
    p = make_problem(WORKLOAD, "ring8", batch_size=1, seq_len=64, mode="training",
                     precisions=("fp16",), microbatches=4)
    plan = megatron_plan(p, 4, 1, 2, "fp16", None, "none", False, 0, "ring", False)
    sym = find_symmetry(p, plan, ideal=False, trace=False)
    assert sym is None or sym.replicas < 4


def test_unequal_replicas_and_inference_are_not_reduced():
    p = _problem("a100x32", 6, 64)
    plan = megatron_plan(p, 4, 1, 1, "bf16", None, "none", False, 0, "ring", False)
    assert find_symmetry(p, dataclasses.replace(plan, microbatches=6), False, False) is None   # 6 % 4
    pi = make_problem(WORKLOAD, "a100x32", batch_size=1, seq_len=64, mode="inference", precisions=("bf16",),
                      microbatches=8)
    plan_i = megatron_plan(pi, 4, 1, 1, "bf16", "stream", "none", False, 0, "ring", False)
    assert find_symmetry(pi, plan_i, False, False) is None


def test_a_run_too_large_for_memory_is_refused_up_front():
    """gpt3-175b on 1,024 GPUs: merged it simulates (bench/cluster_bench.py); in full, or
    with a trace (which needs every copy), it would expand to ~160 M nodes: refused with
    a message before anything is built."""
    from distplan.core.errors import DistplanError

    p = make_problem("gpt3-175b", "a100x1024", batch_size=1, mode="training", precisions=("bf16",),
                     microbatches=1536)
    plan = megatron_plan(p, 16, 8, 8, "bf16", None, "full", False, 0, "ring", False)
    for opts in (SimOptions(symmetry=False), SimOptions(trace=True)):
        with pytest.raises(DistplanError, match="simulation nodes"):
            simulate(p, plan, opts)


@pytest.mark.parametrize("tp", [1, 2])
def test_zero3_pipelines_merge_no_replicas(tp):
    # ZeRO-3 over 2 replicas on a 2-stage pipeline: a reduced run was 1.6 % (tp 1) and
    # 5.4 % (tp 2) off the full one, so such plans keep every replica (rank merges stay)
    p = _problem("dgx-a100", 4, 64)
    plan = megatron_plan(p, 2, tp, 2, "bf16", None, "none", False, 3, "ring", False)
    sym = find_symmetry(p, plan, ideal=False, trace=False)
    assert sym is None or sym.replicas == 1
    full, red = _both(p, plan)
    assert_same_run(red, full)
