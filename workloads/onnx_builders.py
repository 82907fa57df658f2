"""ONNX models built in code with ``onnx.helper`` (tests, benchmarks, acceptance runs):
an MLP, a small CNN, and transformer encoders/decoders shaped like BERT and GPT-2.

Weights are initializers that carry their shape but no data (importing needs shapes
only, and a GPT-2-small model would otherwise be 500 MB); integer constants that shape
inference reads (reshape targets, indices) carry real values. ``fine=True`` spells the
transformer out the way a dynamic-shape exporter does: LayerNorm and GELU decomposed
into primitive ops, dropout nodes, and a Shape/Gather/Unsqueeze/Concat subgraph feeding
every Reshape — the ~2,000-operator graphs real imports produce.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distplan.workloads.onnx_import import _require_onnx

OPSET = 20


class _B:
    """Accumulates nodes, initializers and unique names."""

    def __init__(self) -> None:
        self.onnx = _require_onnx()
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.n = 0

    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}_{self.n}"

    def weight(self, name: str, dims: tuple[int, ...]) -> str:
        t = self.onnx.TensorProto()
        t.name, t.data_type = name, self.onnx.TensorProto.FLOAT
        t.dims.extend(dims)
        self.inits.append(t)
        return name

    def ints(self, values: list[int], scalar: bool = False) -> str:
        name = self.name("c")
        dims = [] if scalar else [len(values)]
        self.inits.append(self.onnx.helper.make_tensor(name, self.onnx.TensorProto.INT64, dims, values))
        return name

    def floats(self, value: float) -> str:
        name = self.name("f")
        self.nodes.append(self.onnx.helper.make_node(
            "Constant", [], [name], value=self.onnx.helper.make_tensor(name + "_v", self.onnx.TensorProto.FLOAT,
                                                                       [], [value])))
        return name

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs: Any) -> Any:
        base = self.name(op_type)
        outs = [f"{base}_o{i}" for i in range(n_out)]
        self.nodes.append(self.onnx.helper.make_node(op_type, inputs, outs, name=base, **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, name: str, inputs: list[Any], outputs: list[Any]) -> Any:
        h = self.onnx.helper
        g = h.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        return h.make_model(g, opset_imports=[h.make_opsetid("", OPSET)], producer_name="distplan")


def mlp_onnx(batch: int, sizes: tuple[int, ...]) -> Any:
    """Gemm (+bias) layers with Relu between them: ``sizes = (in, hidden..., out)``."""
    b = _B()
    onnx = b.onnx
    x = "x"
    for i, (a, c) in enumerate(zip(sizes, sizes[1:])):
        x = b.op("Gemm", [x, b.weight(f"w{i}", (c, a)), b.weight(f"b{i}", (c,))], transB=1)
        if i < len(sizes) - 2:
            x = b.op("Relu", [x])
    return b.model("mlp", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch, sizes[0]])],
                   [onnx.helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, None)])


def cnn_onnx(batch: int, channels: tuple[int, ...] = (3, 8, 16), image: int = 16, classes: int = 10) -> Any:
    """Conv3x3(pad 1)+bias -> Relu -> MaxPool2 per stage, then Flatten and a Gemm."""
    b = _B()
    onnx = b.onnx
    x, side = "img", image
    for i, (a, c) in enumerate(zip(channels, channels[1:])):
        x = b.op("Conv", [x, b.weight(f"conv{i}.w", (c, a, 3, 3)), b.weight(f"conv{i}.b", (c,))],
                 kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        x = b.op("Relu", [x])
        x = b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        side //= 2
    x = b.op("Flatten", [x], axis=1)
    feat = channels[-1] * side * side
    x = b.op("Gemm", [x, b.weight("fc.w", (classes, feat)), b.weight("fc.b", (classes,))], transB=1)
    return b.model("cnn", [onnx.helper.make_tensor_value_info("img", onnx.TensorProto.FLOAT,
                                                              [batch, channels[0], image, image])],
                   [onnx.helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, None)])


@dataclass(frozen=True)
class TransformerShape:
    """A BERT-style (post-norm encoder) or GPT-2-style (pre-norm causal decoder) model."""

    layers: int
    hidden: int
    heads: int
    vocab: int
    max_positions: int
    ffn: int | None = None
    decoder: bool = True       # GPT-2: pre-norm, causal mask, final norm, tied LM head
    type_vocab: int = 0        # BERT token types (encoder only)

    @property
    def ffn_size(self) -> int:
        return self.ffn or 4 * self.hidden


GPT2_SMALL = TransformerShape(layers=12, hidden=768, heads=12, vocab=50257, max_positions=1024)
BERT_BASE = TransformerShape(layers=12, hidden=768, heads=12, vocab=30522, max_positions=512,
                             decoder=False, type_vocab=2)
BERT_LARGE = TransformerShape(layers=24, hidden=1024, heads=16, vocab=30522, max_positions=512,
                              decoder=False, type_vocab=2)


def transformer_onnx(cfg: TransformerShape, batch: int, seq: int, fine: bool = False) -> Any:
    """The transformer as an exporter would write it (see the module docstring)."""
    b = _B()
    onnx = b.onnx
    h, a = cfg.hidden, cfg.heads
    dh = h // a

    def reshape(x: str, dims: list[int]) -> str:
        if not fine:
            return b.op("Reshape", [x, b.ints(dims)])
        shp = b.op("Shape", [x])  # dynamic-shape style: batch and length read from x
        parts = [b.op("Unsqueeze", [b.op("Gather", [shp, b.ints([i], scalar=True)], axis=0), b.ints([0])])
                 for i in range(2)]
        return b.op("Reshape", [x, b.op("Concat", parts + [b.ints(dims[2:])], axis=0)])

    def layernorm(x: str, p: str) -> str:
        g, beta = b.weight(p + ".g", (h,)), b.weight(p + ".b", (h,))
        if not fine:
            return b.op("LayerNormalization", [x, g, beta], axis=-1, epsilon=1e-5)
        mean = b.op("ReduceMean", [x, b.ints([-1])])
        d = b.op("Sub", [x, mean])
        var = b.op("ReduceMean", [b.op("Pow", [d, b.floats(2.0)]), b.ints([-1])])
        std = b.op("Sqrt", [b.op("Add", [var, b.floats(1e-5)])])
        return b.op("Add", [b.op("Mul", [b.op("Div", [d, std]), g]), beta])

    def gelu(x: str) -> str:
        if not fine:
            return b.op("Gelu", [x])
        e = b.op("Erf", [b.op("Div", [x, b.floats(1.4142135)])])
        return b.op("Mul", [b.op("Mul", [x, b.op("Add", [e, b.floats(1.0)])]), b.floats(0.5)])

    def dropout(x: str) -> str:
        return b.op("Dropout", [x]) if fine else x

    def linear(x: str, p: str, n_in: int, n_out: int) -> str:
        y = b.op("MatMul", [x, b.weight(p + ".w", (n_in, n_out))])
        return b.op("Add", [y, b.weight(p + ".b", (n_out,))])

    def heads_first(x: str) -> str:
        return b.op("Transpose", [reshape(x, [batch, seq, a, dh])], perm=[0, 2, 1, 3])

    wte = b.weight("wte", (cfg.vocab, h))
    x = b.op("Gather", [wte, "ids"], axis=0)
    pos = b.op("Gather", [b.weight("wpe", (cfg.max_positions, h)), b.ints(list(range(seq)))], axis=0)
    x = b.op("Add", [x, pos])
    if cfg.type_vocab:
        x = b.op("Add", [x, b.op("Gather", [b.weight("wtt", (cfg.type_vocab, h)), b.ints([0] * seq)], axis=0)])
    if not cfg.decoder:
        x = layernorm(x, "emb.ln")
    x = dropout(x)
    mask = None
    if cfg.decoder:
        mask = "causal"
        b.inits.append(onnx.helper.make_tensor(mask, onnx.TensorProto.BOOL, [seq, seq],
                                               [j <= i for i in range(seq) for j in range(seq)]))
    scale = b.floats(float(dh) ** 0.5)
    for i in range(cfg.layers):
        p = f"l{i}"
        inp = layernorm(x, p + ".ln1") if cfg.decoder else x
        q, k, v = b.op("Split", [linear(inp, p + ".qkv", h, 3 * h), b.ints([h, h, h])], n_out=3, axis=-1)
        q, v = heads_first(q), heads_first(v)
        kt = b.op("Transpose", [reshape(k, [batch, seq, a, dh])], perm=[0, 2, 3, 1])
        s = b.op("Div", [b.op("MatMul", [q, kt]), scale])
        if mask is not None:
            s = b.op("Where", [mask, s, b.floats(-1e9)])
        prob = dropout(b.op("Softmax", [s], axis=-1))
        ctx = b.op("Transpose", [b.op("MatMul", [prob, v])], perm=[0, 2, 1, 3])
        att = dropout(linear(reshape(ctx, [batch, seq, h]), p + ".proj", h, h))
        x = b.op("Add", [x, att])
        if not cfg.decoder:
            x = layernorm(x, p + ".ln1")
        inp = layernorm(x, p + ".ln2") if cfg.decoder else x
        f = dropout(linear(gelu(linear(inp, p + ".fc1", h, cfg.ffn_size)), p + ".fc2", cfg.ffn_size, h))
        x = b.op("Add", [x, f])
        if not cfg.decoder:
            x = layernorm(x, p + ".ln2")
    if cfg.decoder:
        x = layernorm(x, "ln_f")
        x = b.op("MatMul", [x, b.op("Transpose", [wte], perm=[1, 0])])  # tied head (folded)
    else:  # BERT pooler on the first token
        first = b.op("Gather", [x, b.ints([0], scalar=True)], axis=1)
        x = b.op("Tanh", [b.op("Gemm", [first, b.weight("pool.w", (h, h)), b.weight("pool.b", (h,))], transB=1)])
    name = "gpt2-onnx" if cfg.decoder else "bert-onnx"
    return b.model(name, [onnx.helper.make_tensor_value_info("ids", onnx.TensorProto.INT64, [batch, seq])],
                   [onnx.helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, None)])
