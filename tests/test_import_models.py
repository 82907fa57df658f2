"""Issue 12's remaining import checks: cost rules by hand (recurrent layers, einsum with an
ellipsis, resize), a recurrent model (``torch.nn.LSTM``) and a vision model (ViT from a
``transformers`` config, random weights) through ``torch.onnx.export`` with its default
settings and through ``distplan.from_module`` (torch.export), and import warnings in
``solve.py``'s ``--json`` and table."""
from __future__ import annotations

import contextlib
import io
import json
import warnings

import pytest

from distplan.workloads.op_costs import einsum_flops, resize_flops, rnn_flops


def test_rnn_flops_by_hand():
    # LSTM, I=16, H=32, 2 layers, 5 steps, batch 2: per step and sequence, layer 0
    # 2*4*32*(16+32) + 4*32 (sum of the products) + 2*4*32 (biases) + 24*32 (cell) = 13,440,
    # layer 1 (input 32) 2*4*32*64 + 128 + 256 + 768 = 17,536
    assert rnn_flops("lstm", 5, 2, 16, 32, 2) == (13_440 + 17_536) * 10
    # GRU, bidirectional, one layer: 2*3*32*48 + 96 + 192 + 18*32 = 10,080 per step, sequence, direction
    assert rnn_flops("gru", 5, 2, 16, 32, 1, 2) == 10_080 * 5 * 2 * 2
    # tanh RNN without biases: 2*32*48 + 32 + 4*32
    assert rnn_flops("rnn_tanh", 3, 1, 16, 32, bias=False) == (3072 + 32 + 128) * 3


def test_einsum_with_ellipsis_and_resize_by_hand():
    assert einsum_flops("...ij,...jk->...ik", [(2, 3, 4, 5), (3, 5, 6)]) == 2 * 2 * 3 * 4 * 5 * 6
    assert einsum_flops("bhqd,bhkd->bhqk", [(2, 4, 8, 16), (2, 4, 8, 16)]) == 2 * 2 * 4 * 8 * 8 * 16
    assert resize_flops(100, "nearest", 2) == 0
    assert resize_flops(100, "linear", 2) == 2 * 100 * 4 and resize_flops(100, "cubic", 1) == 2 * 100 * 4


# --- real models --------------------------------------------------------------------------
def _torch():
    return pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e .[torch])")


def _export_default(model, args, path) -> None:
    """``torch.onnx.export`` with its default settings (the dynamo exporter: needs onnxscript)."""
    pytest.importorskip("onnx", reason="the ONNX extra is not installed (pip install -e .[onnx])")
    pytest.importorskip("onnxscript", reason="torch.onnx.export's default exporter needs onnxscript "
                                             "(pip install -e .[transformers])")
    torch = _torch()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, str(path))


def _lstm_model():
    torch = _torch()

    class Tagger(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn, self.out = torch.nn.LSTM(16, 32, num_layers=2), torch.nn.Linear(32, 4)

        def forward(self, x):
            return self.out(self.rnn(x)[0])

    torch.manual_seed(0)
    return Tagger().eval(), torch.randn(5, 2, 16)


def _import_quietly(fn):
    from distplan.workloads.import_common import UnknownOperatorWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = fn()
    assert not [w for w in caught if issubclass(w.category, UnknownOperatorWarning)]
    return g


LSTM_FLOPS = rnn_flops("lstm", 5, 2, 16, 32, 2) + (2 * 10 * 32 * 4 + 10 * 4)   # + the linear head


def test_lstm_exported_by_default_settings(tmp_path):
    from distplan.workloads.onnx_import import import_onnx

    model, x = _lstm_model()
    _export_default(model, (x,), tmp_path / "lstm.onnx")
    g = _import_quietly(lambda: import_onnx(tmp_path / "lstm.onnx"))
    assert g.fwd_flops == LSTM_FLOPS
    assert g.param_elems == sum(p.numel() for p in model.parameters())   # initial states are not parameters


def test_lstm_from_module():
    import distplan

    model, x = _lstm_model()
    g = _import_quietly(lambda: distplan.from_module(model, x))
    assert g.fwd_flops == LSTM_FLOPS and g.param_elems == sum(p.numel() for p in model.parameters())
    assert [op.kind for op in g.ops] == ["matmul", "head"]


def _vit():
    torch = _torch()
    transformers = pytest.importorskip("transformers", reason="the transformers extra is not installed "
                                                              "(pip install -e .[transformers])")
    cfg = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=256)
    torch.manual_seed(0)
    model = transformers.ViTForImageClassification(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():   # as trained weights: no two initializers equal
            p.copy_(torch.randn(p.shape) * 0.02)
    return model, cfg, torch.randn(2, 3, 32, 32)


def vit_flops(model, cfg, b: int) -> int:
    """Patch convolution, every dense layer, attention (scores, softmax 5/score, scale),
    norms 8/elem, GELU 8/elem, residual and position adds, counted from the config."""
    torch = _torch()
    s, h, L, f = (cfg.image_size // cfg.patch_size) ** 2 + 1, cfg.hidden_size, cfg.num_hidden_layers, \
        cfg.intermediate_size
    t, patches = b * s, b * (s - 1)
    lin = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    cls = model.classifier
    dense = sum(2 * t * m.weight.numel() + t * m.bias.numel() for m in lin if m is not cls) \
        + 2 * b * cls.weight.numel() + b * cls.bias.numel()
    conv = 2 * patches * h * 3 * cfg.patch_size ** 2 + patches * h
    scores = b * cfg.num_attention_heads * s * s
    attn = L * (4 * scores * (h // cfg.num_attention_heads) + 6 * scores)
    return conv + dense + attn + 8 * t * h * (2 * L + 1) + 8 * t * f * L + t * h * (2 * L + 1)


def test_vit_exported_by_default_settings(tmp_path):
    from distplan.workloads.onnx_import import import_onnx

    model, cfg, x = _vit()
    _export_default(model, (x,), tmp_path / "vit.onnx")
    g = _import_quietly(lambda: import_onnx(tmp_path / "vit.onnx"))
    assert g.param_elems == sum(p.numel() for p in model.parameters())
    assert abs(g.fwd_flops / vit_flops(model, cfg, 2) - 1) < 0.01
    assert sum(op.kind == "conv" for op in g.ops) == 1 and g.ops[-1].kind == "head"


def test_vit_from_module():
    import distplan

    model, cfg, x = _vit()
    g = _import_quietly(lambda: distplan.from_module(model, x))
    assert g.param_elems == sum(p.numel() for p in model.parameters())
    assert abs(g.fwd_flops / vit_flops(model, cfg, 2) - 1) < 0.01


def test_gpt2_from_module_with_keyword_inputs():
    """torch.export traces a transformers decoder (fx cannot); the LM head stays tied."""
    import distplan

    torch = _torch()
    transformers = pytest.importorskip("transformers", reason="the transformers extra is not installed")
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=500, n_positions=32)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 500, (1, 16))
    g = _import_quietly(lambda: distplan.from_module(model, {"input_ids": ids}))
    assert g.param_elems == sum(p.numel() for p in model.parameters())
    head = g.ops[-1]
    assert head.kind == "head" and head.tied_to == g.ops[0].name and head.tied_elems == 500 * 64
    t, h = 16, 64
    dense = sum(2 * t * m.weight.numel() + t * (m.bias.numel() if m.bias is not None else 0)
                for m in model.modules() if type(m).__name__ in ("Conv1D", "Linear"))
    attn = 2 * (4 * 2 * t * t * (h // 2) + 5 * 2 * t * t)
    expected = dense + attn + 8 * t * h * 5 + 8 * t * 4 * h * 2 + t * h * 5
    assert abs(g.fwd_flops / expected - 1) < 0.01


# --- warnings reach the report ----------------------------------------------------------------
def test_unknown_operator_warning_in_json_and_table(tmp_path, capsys):
    onnx = pytest.importorskip("onnx", reason="the ONNX extra is not installed (pip install -e .[onnx])")
    from onnx import TensorProto, helper

    from distplan.cli.main import main

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])
    w = onnx.numpy_helper.from_array(__import__("numpy").arange(64 * 64, dtype="float32").reshape(64, 64), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="mm"),
             helper.make_node("Hardmax", ["a"], ["b"], name="odd"),      # no cost rule
             helper.make_node("MatMul", ["b", "w"], ["y"], name="mm2")]
    model = helper.make_model(helper.make_graph(nodes, "m", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "odd.onnx"
    onnx.save(model, str(path))
    args = ["--workload", str(path), "--topology", "mcm2x2", "--time-limit", "20", "--top-k", "1",
            "--plan-out", str(tmp_path / "plan.json")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(args + ["--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert len(doc["warnings"]) == 1 and "'Hardmax'" in doc["warnings"][0]
        assert main(args) == 0
    assert "warning: ONNX import: 1 operator(s) of unknown type 'Hardmax'" in capsys.readouterr().out
