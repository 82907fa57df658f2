"""fp8 training (the Transformer Engine recipe): fp8 linear layers, bf16 elsewhere, in the
what-if and as a recipe the cluster space searches beside bf16."""
from __future__ import annotations

import pytest

import distplan
from distplan.api.configs import whatif
from distplan.costs.megatron import FP8_TRAINING_KINDS, fp8_training_precisions
from distplan.costs.memory import static_bytes
from distplan.model.cluster import plan_cluster, training_recipes
from distplan.sim import simulate


def test_fp8_training_keeps_16_bit_weights_and_two_fp8_copies():
    # 2 (bf16 weight) + 1 (fp8 gradient) + 12 (Adam: fp32 master, two moments) + 2 x 1
    # (fp8 weight and its transpose): 17 B a parameter, bf16's 2 + 2 + 12 = 16 plus one
    assert static_bytes(1000, "fp8", training=True) == 17_000
    assert static_bytes(1000, "bf16", training=True) == 16_000
    assert static_bytes(1000, "fp8", training=False) == 1_000


def test_the_recipe_puts_only_linear_layers_in_fp8():
    p = distplan.problem("gpt3-125m", "h100x16", mode="training", microbatches=8, precisions=("bf16", "fp8"))
    precs = fp8_training_precisions(p, "bf16")
    kinds = {op.kind: precs[v] for v, op in enumerate(p.graph.ops)}
    assert kinds["matmul"] == "fp8" and FP8_TRAINING_KINDS == {"matmul"}
    # embedding, attention's batched products, head, norms, softmax: bf16
    for k in ("embedding", "attn_score", "attn_context", "head", "layernorm", "softmax"):
        assert kinds[k] == "bf16", k
    assert precs.count("fp8") == 12 * 4   # qkv, proj, ffn1, ffn2 per layer
    assert training_recipes(p) == ["", "fp8"]
    assert training_recipes(distplan.problem("gpt3-125m", "a100x16", mode="training", microbatches=8)) == [""]


def test_the_cluster_space_chooses_fp8_where_it_pays_and_the_simulator_agrees():
    kw = dict(mode="training", microbatches=8)
    wide = plan_cluster(distplan.problem("gpt3-350m", "h100x8", precisions=("bf16",), **kw), time_limit_s=30, top_k=1)
    p = distplan.problem("gpt3-350m", "h100x8", precisions=("bf16", "fp8"), **kw)
    both = plan_cluster(p, time_limit_s=30, top_k=3)
    best = both.plans[0]
    assert best.point.precision == "fp8" and "fp8" in best.point.label()
    assert best.plan.op_precision == fp8_training_precisions(p, "bf16")
    # the space holds every bf16 plan, so its best is no slower; fp8 matrix products pay
    assert best.iteration_s < 0.9 * wide.plans[0].iteration_s
    assert simulate(p, best.plan).iteration_s == pytest.approx(best.iteration_s, rel=1e-9)


def test_whatif_fp8_is_faster_than_bf16_and_holds_more_static_bytes():
    args = ("gpt3-350m", "h100x16", 16, 1, 1, 1, 32)
    a, b = whatif(*args, precision="bf16", breakdown=False), whatif(*args, precision="fp8", breakdown=False)
    assert b.plan.op_precision == fp8_training_precisions(b.problem, "bf16")
    assert b.iteration_s < a.iteration_s


def test_an_moe_router_stays_wide_under_fp8():
    p = distplan.problem("deepseek-1024x4x8x16", "h100x8", mode="training", microbatches=8,
                         precisions=("bf16", "fp8"))
    precs = fp8_training_precisions(p, "bf16")
    routers = [v for v, op in enumerate(p.graph.ops) if op.name.endswith(".router")]
    assert routers and all(precs[v] == "bf16" for v in routers)
    assert any(precs[v] == "fp8" for v, op in enumerate(p.graph.ops) if op.name.endswith(".ffn1"))
