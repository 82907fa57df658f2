"""Symmetry reduction of expert-parallel plans (``sim.symmetry``): a replica shift by a
multiple of ep x stride maps every expert-data-parallel group onto itself in ring order,
so where it also permutes the links the plan uses without fixing any, one block of
replicas is simulated and the others repeat it. The reduced run must give exactly the
full run's figures, shared rails and hierarchical reductions included."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distplan.api.configs import whatif
from distplan.core.errors import DistplanError
from distplan.sim import SimOptions, simulate
from distplan.sim.symmetry import find_symmetry

from test_sim_symmetry import assert_same_run

MOE, SEQ = "deepseek-64x2x4x16", 64


def _plan(topology: str, **kw):
    w = whatif(MOE, topology, seq_len=SEQ, breakdown=False, check_memory=False, **kw)
    return w.problem, w.plan


def test_a_node_of_replicas_is_simulated_for_hierarchical_expert_reductions():
    # dp 16 x ep 8 on two 8-GPU H100 nodes, hierarchical overlapped reduction: the expert
    # groups {j, j + 8} and the rings across nodes run on rail j; shifting by one node is exact
    p, plan = _plan("h100x16", dp=16, tp=1, pp=1, ep=8, zero=1, global_batch=32, dp_allreduce="hierarchical",
                    overlap_grad_reduce=True)
    sym = find_symmetry(p, plan, ideal=False, trace=False)
    assert sym is not None and sym.group == 8 and sym.replicas == 2
    assert_same_run(simulate(p, plan), simulate(p, plan, SimOptions(symmetry=False)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology=st.sampled_from(["a100x16", "h100x16", "h100x32", "dgx-a100"]), dp=st.sampled_from([4, 8, 16]),
       tp=st.sampled_from([1, 2]), pp=st.sampled_from([1, 2]), ep=st.sampled_from([2, 4, 8]),
       zero=st.sampled_from([0, 1, 3]), allreduce=st.sampled_from(["ring", "hierarchical"]),
       overlap=st.booleans(), link_model=st.sampled_from(["fifo", "fair"]))
def test_reduced_expert_runs_equal_full_runs(topology, dp, tp, pp, ep, zero, allreduce, overlap, link_model):
    try:
        p, plan = _plan(topology, dp=dp, tp=tp, pp=pp, ep=ep, zero=zero, global_batch=2 * dp * pp,
                        dp_allreduce=allreduce, overlap_grad_reduce=overlap and zero < 3)
    except DistplanError:
        return   # a layout the model or the topology cannot take
    assert_same_run(simulate(p, plan, SimOptions(link_model=link_model)),
                    simulate(p, plan, SimOptions(link_model=link_model, symmetry=False)))
