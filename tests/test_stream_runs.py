"""Merged ZeRO-3 chains (``sim.stream_runs``): a device's ring chain on links only its
chains use runs as one node, and the run's figures are the unmerged run's (every
transfer its own node, ``SimOptions(merge_chains=False)``), contention included."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distplan.api.configs import whatif
from distplan.core.errors import DistplanError
from distplan.sim import SimOptions, simulate
from distplan.sim.program import build_program
from distplan.sim.stream_runs import chain_s, unmerged_types
from test_fsdp import _layers

MOE, DENSE, SEQ = "deepseek-64x2x4x16", "gpt2", 64


def _same(a, b) -> None:
    for f in ("iteration_s", "makespan_s", "period_s"):
        assert getattr(a, f) == pytest.approx(getattr(b, f), rel=1e-12, abs=1e-15), f
    assert a.steady == b.steady and a.n_nodes == b.n_nodes and a.n_tasks == b.n_tasks
    for f in ("peak_memory_bytes", "peak_own_memory_bytes", "device_busy_s", "link_busy_s", "link_bytes",
              "microbatch_done_s"):
        np.testing.assert_allclose(getattr(a, f), getattr(b, f), rtol=1e-12, atol=1e-12, err_msg=f)


def test_a_chain_is_its_hops_back_to_back_with_the_latencies_between():
    # 2 steps over hops of 1 s (latency 0.1 s) and 2 s (latency 0.2 s): 1 + .1 + 2 + .2 + 1 + .1 + 2;
    # the last hop's latency is the merged node's own server's
    lat = {10: 0.1, 11: 0.2}
    assert chain_s((2, ((10, 1.0, 5.0), (11, 2.0, 5.0))), lat.__getitem__) == pytest.approx(6.4)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_a_ring_of_private_links_merges_every_chain(n):
    # each link d -> d+1 carries the chains into d+1 alone: one node per chain, the same figures
    p, plan = _layers(n, 3)
    merged = build_program(p, plan, merge=True)
    plain = build_program(p, plan)
    assert merged.spread and unmerged_types(merged) == plain.T
    assert merged.T == plain.T - len(merged.spread) * (n - 2)   # n - 1 steps of one hop: one node
    _same(simulate(p, plan), simulate(p, plan, SimOptions(merge_chains=False)))


def test_a_shared_link_keeps_its_transfers():
    # h100x16: the dense ring's node-crossing hop and the expert-data rings share rails
    # (costs.fsdp.rings_contend), the queueing the analytic iteration refuses to time
    w = whatif(MOE, "h100x16", dp=16, tp=1, pp=1, ep=8, zero=3, global_batch=32, seq_len=SEQ, breakdown=False)
    merged = build_program(w.problem, w.plan, merge=True)
    plain = build_program(w.problem, w.plan)
    kept = sum(1 for t in range(merged.T) if merged.kind[t] == 4 and t not in merged.spread)
    assert merged.spread and kept > 0 and unmerged_types(merged) == plain.T
    _same(simulate(w.problem, w.plan), simulate(w.problem, w.plan, SimOptions(merge_chains=False)))
    assert w.iteration_s == simulate(w.problem, w.plan).iteration_s


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from([MOE, DENSE]), topology=st.sampled_from(["a100x16", "h100x16", "dgx-a100"]),
       dp=st.sampled_from([2, 4, 8]), tp=st.sampled_from([1, 2]), pp=st.sampled_from([1, 2]),
       ep=st.sampled_from([1, 2, 4]), zero=st.sampled_from([2, 3]), recompute=st.sampled_from(["none", "full"]),
       link_model=st.sampled_from(["fifo", "free"]), symmetry=st.booleans())
def test_merged_runs_equal_unmerged_runs(model, topology, dp, tp, pp, ep, zero, recompute, link_model, symmetry):
    if model == DENSE:
        ep = 1
    try:
        w = whatif(model, topology, dp=dp, tp=tp, pp=pp, ep=ep, zero=zero, recompute=recompute,
                   global_batch=2 * dp * pp, seq_len=SEQ, breakdown=False, check_memory=False)
    except DistplanError:
        return   # a layout the model or the topology cannot take
    opts = dict(link_model=link_model, symmetry=symmetry)
    _same(simulate(w.problem, w.plan, SimOptions(**opts)),
          simulate(w.problem, w.plan, SimOptions(merge_chains=False, **opts)))
