"""Issue 21: the planner's figure for a plan (MILP period; analytic iteration in the
cluster space) against the realistic simulation of that plan, on the top plans returned.
Target: median |gap| <= 2 %, worst <= 5 % (``bench/milp_vs_sim.py`` prints the whole
table). The default run holds a few cases (~30 s); the slow ones take the real exports.

The case that found the gap: BERT exported by ``torch.onnx.export(..., dynamo=False)``
with an attention mask expands one boolean mask and gives each layer its own ``Where``;
before ``workloads/rematerialize.py`` looked through those, layer 0's kernel wrote the
mask and it was relayed to every later stage, where the receivers' flow control and the
producer's double buffer made one credit loop of the pipeline: BERT-base on mcm4x4 22 %
slower than its MILP period (5.834e-4 vs 4.787e-4 s), the small model below +131 %.
"""
from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import milp_vs_sim as bench  # noqa: E402

MEDIAN, WORST = bench.TARGET_MEDIAN, bench.TARGET_WORST


def _assert_close(rows: list[bench.Row], worst: float = WORST) -> None:
    compared = [r for r in rows if math.isfinite(r.gap)]
    assert compared, [bench.format_row(r) for r in rows]
    for r in compared:
        assert abs(r.gap) <= worst, bench.format_row(r)


@pytest.mark.parametrize("name,topology,mode", [("bert-base", "mcm4x4", "inference"),
                                                ("gpt2", "dgx-a100", "training")])
def test_zoo_top_plans_simulate_at_their_model_figure(name, topology, mode):
    rows = bench.plan_rows(name, name, topology, mode, time_limit_s=20, top_k=3)
    _assert_close(rows)   # every plan returned (3 unless the clock of a loaded machine cut the top-K short)


def _small_chiplets():
    """mcm4x4 with 3 MiB chiplets: a 12-layer, 256-wide BERT then needs 8 stages (2 lanes),
    so tensors cross up to 7 stage boundaries, as BERT-base's do on the real chiplets."""
    from distplan.topologies import kinds as K  # noqa: PLC0415
    from distplan.topologies.builders import mesh  # noqa: PLC0415

    return mesh("mcm4x4-3MiB", 4, 4, dataclasses.replace(K.CHIPLET, mem_capacity_bytes=3 * K.MIB),
                K.NOP_BW_BYTES_PER_S, K.NOP_LATENCY_S)


def test_legacy_export_with_a_mask_simulates_at_the_milp_period(tmp_path):
    """The legacy exporter's per-layer ``Where`` masks (before: +131 % on this case)."""
    pytest.importorskip("onnx")
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    import transformers as tf  # noqa: PLC0415

    from distplan.workloads.onnx_import import import_onnx  # noqa: PLC0415

    fam = bench.Family("bert-12x256", lambda: tf.BertModel(tf.BertConfig(
        vocab_size=1000, num_hidden_layers=12, hidden_size=256, num_attention_heads=4, intermediate_size=1024)),
        bench._enc_inputs, "small")
    g = import_onnx(bench.export(fam, "legacy", tmp_path), mode="inference")
    rows = bench.plan_rows("bert-12x256/legacy", g, _small_chiplets(), "inference", time_limit_s=10, top_k=3)
    assert all(int(r.note.split()[0]) >= 4 for r in rows if r.rank), rows   # the mask would cross >= 3 cuts
    _assert_close(rows, worst=MEDIAN)


@pytest.mark.slow
def test_bert_base_legacy_export_on_mcm4x4_simulates_at_the_zoo_period(tmp_path):
    """The issue's case: BERT-base, 128 tokens, ids and attention mask, legacy exporter,
    mcm4x4 inference: the MILP's 4.787e-4 s (the zoo's is 4.784e-4) and now the realistic
    simulation too (was 5.834e-4 s, 1,714 samples/s)."""
    pytest.importorskip("transformers")
    rows = bench.import_rows("bert", "legacy", tmp_path, ("mcm4x4",), time_limit_s=60, top_k=3)
    _assert_close(rows, worst=MEDIAN)
    assert 1 / rows[0].sim_s > 2080


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gpt2", "llama", "bart"])
def test_import_families_simulate_at_their_milp_period(family, tmp_path):
    pytest.importorskip("transformers")
    rows = [r for exporter in bench.EXPORTERS
            for r in bench.import_rows(family, exporter, tmp_path, bench.TOPOLOGIES, time_limit_s=20, top_k=3)]
    _assert_close(rows)
    n, median, _, _ = bench.summary(rows)
    assert n and median <= MEDIAN
