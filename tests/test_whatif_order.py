"""The what-if's device order (``--order``, costs.megatron.ORDERS): Megatron-LM's default
tp-dp-pp and Llama 3's tp-pp-dp (data parallelism outermost); on a rail-optimised fat tree
of two 32-node units the reduced run of the latter equals the full run."""
from __future__ import annotations

import pytest

from distplan.api.configs import whatif
from distplan.api.problem import problem as make_problem
from distplan.core.errors import DistplanError
from distplan.costs.megatron import megatron_plan
from distplan.sim import SimOptions, simulate
from distplan.sim.symmetry import find_symmetry


def test_orders_lay_devices_out_exactly():
    p = make_problem("gpt3-64x2x2", "h100x8", batch_size=1, seq_len=8, mode="training", precisions=("bf16",),
                     microbatches=4)
    meg = megatron_plan(p, 2, 2, 2, "bf16")
    assert [s.devices for s in meg.stages] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    llama = megatron_plan(p, 2, 2, 2, "bf16", order="tp-pp-dp")
    assert [s.devices for s in llama.stages] == [(0, 1, 4, 5), (2, 3, 6, 7)]   # replica i: devices 4i..4i+3
    with pytest.raises(DistplanError, match="--order 'pp-dp-tp' unknown"):
        megatron_plan(p, 2, 2, 2, "bf16", order="pp-dp-tp")


def test_dp_outermost_on_two_units_merges_pairs_of_replicas_exactly():
    """dp 16 x tp 8 x pp 4 on h100x512-os4: a replica is 4 nodes, a unit 32 nodes holds 8
    of them; its gradient rings cross units (4:1 oversubscribed trunks) every 8th hop, so
    the reduction merges 2 x 8 copies, and gives the full run's figures."""
    p = make_problem("gpt3-256x4x4", "h100x512-os4", batch_size=1, seq_len=64, mode="training",
                     precisions=("bf16",), microbatches=32)
    plan = megatron_plan(p, 16, 8, 4, "bf16", None, "none", True, 1, order="tp-pp-dp")
    sym = find_symmetry(p, plan, ideal=False, trace=False)
    assert (sym.replicas, sym.ranks, sym.group) == (2, 8, 8)
    full = simulate(p, plan, SimOptions(symmetry=False))
    red = simulate(p, plan)
    assert red.iteration_s == pytest.approx(full.iteration_s, rel=1e-12)
    assert red.makespan_s == pytest.approx(full.makespan_s, rel=1e-12) and red.n_nodes == full.n_nodes


def test_whatif_names_a_non_default_order():
    # 4 heads: tp 4 must divide them (api.configs.check_tp_divides_heads)
    w = whatif("gpt3-64x2x4", "h100x16", dp=2, tp=4, pp=2, seq_len=8, order="tp-pp-dp", breakdown=False)
    assert "order tp-pp-dp" in w.table() and w.to_json()["order"] == "tp-pp-dp"
    assert "order" not in whatif("gpt3-64x2x4", "h100x16", dp=2, tp=4, pp=2, seq_len=8, breakdown=False).table()
