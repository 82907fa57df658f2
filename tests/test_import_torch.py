"""torch.fx import, and torch -> ONNX export -> ONNX import: models built in code (an MLP,
a small CNN, a transformer block), FLOPs and parameters checked against the model's own
numbers (``sum(p.numel())``) and hand formulas; both import paths must agree."""
from __future__ import annotations

import io
import sys
import warnings

import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e .[torch])")
nn = torch.nn

from distplan.core.errors import DistplanError  # noqa: E402
from distplan.workloads.coarsen import coarsen  # noqa: E402
from distplan.workloads.torch_import import import_module  # noqa: E402


class Block(nn.Module):
    """Pre-norm transformer block with fused QKV, as GPT-2 writes it."""

    def __init__(self, h: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.h, self.a = h, heads
        self.ln1, self.qkv, self.proj = nn.LayerNorm(h), nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.ln2, self.fc1, self.fc2 = nn.LayerNorm(h), nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x):
        B, S, H = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(H, dim=-1)
        q, k, v = (t.view(B, S, self.a, H // self.a).transpose(1, 2) for t in (q, k, v))
        att = torch.softmax(q @ k.transpose(-2, -1) / (H // self.a) ** 0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, S, H))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


def block_flops(B: int, S: int, h: int, a: int) -> int:
    T, scores = B * S, B * a * S * S
    linear = (2 * T * h * 3 * h + T * 3 * h) + (2 * T * h * h + T * h) + (2 * T * h * 4 * h + T * 4 * h) \
        + (2 * T * 4 * h * h + T * h)
    attn = 2 * scores * (h // a) * 2 + scores + 5 * scores  # QK^T, PV, scale, softmax
    return linear + attn + 2 * 8 * T * h + 8 * T * 4 * h + 2 * T * h  # norms, gelu, residual adds


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(16 * 4 * 4, 10))


def _randomised(m: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    with torch.no_grad():
        for p in m.parameters():  # distinct values: the exporter merges identical initializers
            p.normal_()
    return m.eval()


CASES = {
    "mlp": (mlp, lambda: torch.randn(32, 64),
            32 * (2 * 64 * 128 + 128 + 2 * 128 * 128 + 128 + 2 * 128 * 10 + 10 + 2 * 128)),
    "cnn": (cnn, lambda: torch.randn(4, 3, 16, 16),
            # conv outputs 4x8x16x16 and 4x16x8x8: conv + bias, relu, 2x2 max-pool (4 reads per output)
            (2 * 8192 * 27 + 8192) + 8192 + 2048 * 4 + (2 * 4096 * 72 + 4096) + 4096 + 1024 * 4
            + (2 * 4 * 256 * 10 + 40)),
    "block": (Block, lambda: torch.randn(2, 8, 32), block_flops(2, 8, 32, 4)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fx_import_matches_the_model(case):
    make, inputs, flops = CASES[case]
    m = _randomised(make())
    g = import_module(m, inputs(), mode="training", name=case)
    assert g.param_elems == sum(p.numel() for p in m.parameters())
    assert g.fwd_flops == flops
    assert g.name == case and g.mode == "training" and g.bwd_flops >= g.fwd_flops
    c = coarsen(g, target_ops=3)
    assert (c.coarse.fwd_flops, c.coarse.param_elems) == (g.fwd_flops, g.param_elems)


@pytest.mark.parametrize("case", sorted(CASES))
def test_onnx_export_then_import_matches_fx(case):
    pytest.importorskip("onnx", reason="the ONNX extra is not installed (pip install -e .[onnx])")
    from distplan.workloads.onnx_import import import_onnx

    make, inputs, flops = CASES[case]
    m = _randomised(make())
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy (TorchScript) exporter is deprecated
        torch.onnx.export(m, (inputs(),), buf, dynamo=False)
    g = import_onnx(buf.getvalue(), name=case)
    assert g.param_elems == sum(p.numel() for p in m.parameters())
    assert g.fwd_flops == flops == import_module(m, inputs()).fwd_flops


def test_block_kinds_and_edges():
    """torch.fx's node structure, one operator per node (no fusion)."""
    g = import_module(_randomised(Block()), torch.randn(2, 8, 32), tracer="fx", fuse=False)
    kinds = [op.kind for op in g.ops]
    assert kinds.count("attn_score") == 1 and kinds.count("attn_context") == 1
    assert kinds.count("layernorm") == 2 and kinds.count("softmax") == 1
    qkv = g.op("qkv")
    assert qkv.param_elems == 32 * 96 + 96 and qkv.out_elems == 2 * 8 * 96
    assert qkv.touched_elems == 2 * 8 * 32 + 32 * 96 + 96 + 2 * 8 * 96
    view = g.op("view")  # a view: no traffic, no activation of its own, but a real edge
    assert (view.kind, view.touched_elems, view.out_elems, view.fwd_flops) == ("reshape", 0, 0, 0)
    assert g.op("reshape").touched_elems == 2 * 512  # reshape of a transposed tensor copies
    split = {t.dst: t.elems for t in g.tensors if t.src == "split"}
    assert sorted(split.values()) == [512, 512, 512]  # each getitem takes its third


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.body = nn.Linear(16, 16)

    def forward(self, ids):
        return self.body(self.emb(ids)) @ self.emb.weight.t()


def test_tied_weight_counted_once_and_head_labelled():
    g = import_module(Tied(), torch.randint(0, 50, (2, 5)))
    assert g.param_elems == sum(p.numel() for p in Tied().parameters()) == 50 * 16 + 16 * 16 + 16
    assert (g.batch_size, g.seq_len) == (2, 5)
    emb, head = g.ops[0], g.ops[-1]   # named after the fx node ('emb') or the ATen op ('embedding')
    assert emb.kind == "embedding" and emb.param_elems == 800 and emb.bwd_flops == 10 * 16
    assert head.kind == "head"
    assert head.param_elems == 0 and head.fwd_flops == 2 * 10 * 50 * 16
    assert (head.tied_to, head.tied_elems) == (emb.name, 800)


class Branchy(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow cannot be traced
            return x
        return -x


def test_errors_name_the_fix(monkeypatch):
    with pytest.raises(DistplanError, match="could not trace"):
        import_module(Branchy(), torch.randn(3))
    with pytest.raises(DistplanError, match="example inputs"):
        import_module(mlp(), torch.randn(3, 7))
    with pytest.raises(DistplanError, match="nn.Module"):
        import_module(lambda x: x, torch.randn(3))
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(DistplanError, match=r"pip install -e \.\[torch\]"):
        import_module(mlp(), None)


class Odd(nn.Module):
    def forward(self, x):
        return torch.fft.fft(x).real + 1


def test_unknown_operation_warns_and_is_kept():
    from distplan.workloads.onnx_import import UnknownOperatorWarning

    with pytest.warns(UnknownOperatorWarning, match="fft"):
        g = import_module(Odd(), torch.randn(4, 8))
    assert any(op.kind == "other" for op in g.ops)


class _Scatter(nn.Module):
    """A group mask set in place, as DeepSeek-V3's group-limited routing does."""

    def __init__(self, in_place: bool) -> None:
        super().__init__()
        self.in_place = in_place

    def forward(self, x):
        idx = torch.topk(x, 2, dim=-1).indices
        mask = torch.zeros_like(x)
        mask = mask.scatter_(1, idx, 1.0) if self.in_place else mask.scatter(1, idx, 1.0)
        return x * mask


def test_in_place_variants_cost_as_their_operation():
    """``scatter_`` (torch's trailing underscore: in place) is costed as ``scatter``, not
    an unknown operation of a pessimistic cost."""
    import warnings

    from distplan.workloads.onnx_import import UnknownOperatorWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownOperatorWarning)
        g_in, g_out = (import_module(_Scatter(p), torch.randn(4, 8), fuse=False) for p in (True, False))
    assert [(o.kind, o.fwd_flops) for o in g_in.ops] == [(o.kind, o.fwd_flops) for o in g_out.ops]
    assert all(o.kind != "other" for o in g_in.ops)
