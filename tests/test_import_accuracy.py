"""Import accuracy found by models nobody here wrote (issue 26), by hand on small ONNX
graphs built with ``onnx.helper``:

- pooling reads each window clipped to the input: EfficientNet's pooler is
  ``AvgPool2d(1280, ceil_mode=True)`` on a 7 x 7 map, costed 1,280 x 1,280 per output
  before (2.65x the whole model's FLOPs at 224 px);
- a mask added to soft-capped attention scores (Gemma-2's ``tanh(s / cap) * cap``) is a
  mask, not a parameter (two of them, each sequence length squared, were counted);

and, ``slow``, a tiny Gemma-2 exported by ``torch.onnx.export`` whose parameter count
is the torch model's.
"""
from __future__ import annotations

import contextlib
import io
import warnings
from typing import Any

import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX extra is not installed (pip install -e .[onnx])")

import numpy as np  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from distplan.workloads.onnx_import import import_onnx  # noqa: E402
from distplan.workloads.op_costs import pool_flops  # noqa: E402


def _vi(name: str, dims: list[int]) -> Any:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def _model(nodes: list, inputs: list, outputs: list, inits: dict[str, Any] | None = None) -> Any:
    tensors = [numpy_helper.from_array(np.asarray(a, dtype=np.float32), name=n) for n, a in (inits or {}).items()]
    g = helper.make_graph(nodes, "m", inputs, outputs, initializer=tensors)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])


def _pool(op: str, x: list[int], y: list[int], **attrs: Any) -> float:
    """Forward FLOPs of a model that is one pooling node from ``x`` to ``y``."""
    m = _model([helper.make_node(op, ["x"], ["y"], **attrs)], [_vi("x", x)], [_vi("y", y)])
    return import_onnx(m, fuse=False).fwd_flops


def test_pool_flops_by_hand():
    # 5 positions, kernel 3, stride 2, one pad each side: windows [-1, 1], [1, 3], [3, 5] read 2, 3, 2
    assert pool_flops((1, 1, 5), (1, 1, 3), (3,), (2,), (1,)) == 7
    # dilation 2 on 7 positions: windows {0, 2, 4}, {2, 4, 6}, {4, 6, 8}: 3 + 3 + 2
    assert pool_flops((1, 1, 7), (1, 1, 3), (3,), (2,), (0,), (2,)) == 8
    # 3 x 3, stride 1, pad 1 on 4 x 4: per axis 2 + 3 + 3 + 2 = 10 taps, 100 per channel
    assert pool_flops((2, 3, 4, 4), (2, 3, 4, 4), (3, 3), (1, 1), (1, 1)) == 6 * 100


def test_average_pool_window_is_clipped_to_the_input():
    """EfficientNet's pooler on its last 7 x 7 map of 8 channels: 8 x 49 additions (the
    input once), not 8 x 1,280 x 1,280 (20,971,520)."""
    assert _pool("AveragePool", [1, 8, 7, 7], [1, 8, 1, 1], kernel_shape=[1280, 1280], strides=[1280, 1280],
                 ceil_mode=1) == 8 * 49
    assert _pool("GlobalAveragePool", [1, 8, 7, 7], [1, 8, 1, 1]) == 8 * 49
    # padding reads nothing: 3 x 3 windows over 4 x 4 with one pad each side, explicit or SAME
    assert _pool("MaxPool", [1, 2, 4, 4], [1, 2, 4, 4], kernel_shape=[3, 3], pads=[1, 1, 1, 1]) == 2 * 100
    assert _pool("AveragePool", [1, 2, 4, 4], [1, 2, 4, 4], kernel_shape=[3, 3], auto_pad="SAME_UPPER",
                 count_include_pad=1) == 2 * 100
    # windows that tile the input read it once; overlapping ones more often
    assert _pool("MaxPool", [1, 2, 8, 8], [1, 2, 4, 4], kernel_shape=[2, 2], strides=[2, 2]) == 2 * 64
    assert _pool("LpPool", [1, 1, 6, 6], [1, 1, 4, 4], kernel_shape=[3, 3]) == 16 * 9


@pytest.mark.slow
def test_torch_pooling_is_clipped_too():
    """``distplan.from_module``: the same pooler (``nn.AvgPool2d(1280, ceil_mode=True)``,
    8 x 49) and ``F.max_pool2d(x, 3, 1, 1)`` on 7 x 7 (per axis 2 + 5 x 3 + 2 = 19 taps,
    8 x 361), then their broadcast sum (8 x 49); ~25 s of torch.export on a loaded machine."""
    torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e .[torch])")
    import distplan

    class Pooler(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pool = torch.nn.AvgPool2d(1280, ceil_mode=True)

        def forward(self, x):
            return torch.nn.functional.max_pool2d(x, 3, 1, 1) + self.pool(x)

    g = distplan.from_module(Pooler(), torch.randn(1, 8, 7, 7))
    assert g.fwd_flops == 8 * 49 + 8 * 361 + 8 * 49


def _softcapped_scores_plus(name: str, value: Any) -> Any:
    """Scores q @ k^T (1, 2 heads, 16, 16), soft-capped as Gemma-2 does (``tanh(s / 50) *
    50``), plus the constant ``name``, then a softmax."""
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Div", ["s", "cap"], ["d"]),
             helper.make_node("Tanh", ["d"], ["t"]), helper.make_node("Mul", ["t", "cap"], ["c"]),
             helper.make_node("Add", ["c", name], ["cm"]), helper.make_node("Softmax", ["cm"], ["p"], axis=-1)]
    return _model(nodes, [_vi("q", [1, 2, 16, 8]), _vi("kt", [1, 2, 8, 16])], [_vi("p", [1, 2, 16, 16])],
                  {"cap": np.array(50.0), name: value})


def test_mask_after_logit_soft_capping_is_not_a_parameter():
    causal = np.triu(np.full((16, 16), np.finfo(np.float32).min), 1)[None, None]       # (1, 1, 16, 16)
    assert import_onnx(_softcapped_scores_plus("mask", causal)).param_elems == 0
    window = causal + np.tril(np.full((16, 16), np.finfo(np.float32).min), -4)[None, None]   # sliding window
    assert import_onnx(_softcapped_scores_plus("mask", window)).param_elems == 0
    # a learned bias in the same place stays a parameter (all its values distinct)
    bias = np.random.default_rng(0).normal(size=(1, 2, 16, 16)) * 0.02
    assert import_onnx(_softcapped_scores_plus("bias", bias)).param_elems == 2 * 256


@pytest.mark.slow
@pytest.mark.parametrize("seq", [16, 24])
def test_gemma2_exported_by_default_settings_counts_the_models_parameters(tmp_path, seq):
    """A tiny Gemma-2 (random weights, nothing downloaded) through ``torch.onnx.export``:
    its two masks (global and sliding window, seq x seq each) were counted as parameters
    (22,816 + 2 x 24^2 at 24 tokens)."""
    torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e .[torch])")
    transformers = pytest.importorskip("transformers", reason="the transformers extra is not installed")
    pytest.importorskip("onnxscript", reason="torch.onnx.export's default exporter needs onnxscript")
    cfg = transformers.Gemma2Config(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=4,
                                    max_position_embeddings=64, attn_logit_softcapping=50.0,
                                    final_logit_softcapping=30.0, use_cache=False)
    torch.manual_seed(0)
    model = transformers.Gemma2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():   # as trained weights: no two initializers equal
            p.copy_(torch.randn(p.shape) * 0.02)
    ids = torch.randint(0, cfg.vocab_size, (1, seq))
    path = tmp_path / "gemma2.onnx"
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (), str(path), kwargs={"input_ids": ids})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = import_onnx(path)
    assert g.param_elems == sum(p.numel() for p in model.parameters())
