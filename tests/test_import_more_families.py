"""Model families nobody here wrote, through both importers (``transformers`` models from
small configs with random weights, exported by the dynamo ``torch.onnx.export`` and
imported with ``import_onnx``, and traced by ``distplan.from_module``). For each family
and path: parameters equal the module's exactly (or differ by exactly what the exporter
removed, ``Family.onnx_missing``); matrix-product FLOPs lie between
``torch.utils.flop_counter``'s count and that count plus the epilogues distplan costs
with a product by convention (ONNX within 0.6 %, ``from_module`` within 1.3 %, Swin
3.9 %); no unknown operator; ``distplan.solve`` finds a plan on dgx-a100.

Then focused tests of the import rules those families needed (hand-built ONNX graphs):
folded rotary tables, ALiBi slopes and batch-norm statistics are not parameters,
folded position-bias lookups count as the entries they hold, window masks not at all,
and torch's record of what each initializer was is read. The default run keeps Llama,
ALBERT, Swin, ResNet and Mixtral (``from_module``) at 2 layers, hidden <= 64; the other
families and Swin-tiny and ResNet-50 at full size are ``slow``.
"""
from __future__ import annotations

import contextlib
import copy
import io
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX extra is not installed (pip install -e .[onnx])")
torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e .[torch])")
transformers = pytest.importorskip(
    "transformers", reason="the transformers extra is not installed (pip install -e .[transformers])")
pytest.importorskip("onnxscript", reason="torch.onnx.export's default (dynamo) exporter needs onnxscript "
                                         "(pip install -e .[transformers])")

import numpy as np  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import distplan  # noqa: E402
from distplan.workloads.onnx_import import UnknownOperatorWarning, import_onnx  # noqa: E402
from distplan.workloads.torch_import import import_module  # noqa: E402

T = transformers
#: operator kinds that are matrix products (convolutions included)
PRODUCTS = frozenset({"matmul", "head", "conv", "attn_score", "attn_context"})
SEQ = 32


# --- the families -------------------------------------------------------------------------
@dataclass(frozen=True)
class Family:
    """A model family: how to build a small model, and its example inputs."""

    name: str
    build: Callable[[], Any]
    inputs: Callable[[], dict[str, Any]]
    #: parameters the dynamo exporter's optimiser removes from the file (see each family)
    onnx_missing: Callable[[Any], int] = lambda model: 0


def _ids(vocab: int = 1000, batch: int = 1, seq: int = SEQ) -> Any:
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))


def _pixels(size: int = 64) -> Any:
    return torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0))


def _tokens() -> dict[str, Any]:
    return {"input_ids": _ids()}


def _tokens_and_mask() -> dict[str, Any]:
    return {"input_ids": _ids(), "attention_mask": torch.ones(1, SEQ, dtype=torch.long)}


def _image() -> dict[str, Any]:
    return {"pixel_values": _pixels()}


def _decoder_only(cls: Any, config: Any) -> Callable[[], Any]:
    """A causal LM with grouped-query attention (4 query heads over 2 key/value heads)."""
    return lambda: cls(config(vocab_size=1000, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                              use_cache=False))


def _albert() -> Any:
    """Every layer shares one layer's weights (parameters counted once). A position table
    of 512 x 32: the exporter folds a lookup at constant rows from a table of at most 8,192
    elements into the rows alone, which would leave the unread rows out of the file
    (ALBERT-base's is 512 x 128, never folded)."""
    return T.AlbertModel(T.AlbertConfig(vocab_size=1000, embedding_size=32, hidden_size=64, intermediate_size=256,
                                        num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=512))


def _swin() -> Any:
    """Two blocks per stage: the second is shifted, with its window mask; each block has
    its relative position table, which the exporter folds with its lookup."""
    return T.SwinModel(T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[2], num_heads=[2],
                                    window_size=4))


def _resnet() -> Any:
    return T.ResNetModel(T.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                                        layer_type="bottleneck"))


def _batch_norm_channels(model: Any) -> int:
    """The exporter's optimiser folds each batch norm after a convolution into it: its
    scale and shift (2 C parameters) become the convolution's bias (C)."""
    return sum(m.num_features for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d))


def _unread_position_rows(model: Any) -> int:
    """A learned position table of at most 8,192 elements looked up at the constant
    positions 0..S-1: the exporter folds the lookup into the S rows read (GPT-BigCode's
    128 x 64 table at 32 positions: 6,144 elements not in the file)."""
    wpe = model.transformer.wpe.weight
    return (wpe.shape[0] - SEQ) * wpe.shape[1] if wpe.numel() <= 8192 else 0


def _unread_t5_buckets(model: Any) -> int:
    """T5's relative position bias is folded with its bucket lookup (a [1, heads, S, S]
    constant): the file holds the buckets the positions reach and no others. The buckets
    reached are counted by transformers' own bucketing (encoder: 32 positions both ways;
    decoder: 8, causal)."""
    from transformers.models.t5.modeling_t5 import T5Attention  # noqa: PLC0415

    def reached(n: int, bidirectional: bool) -> int:
        pos = torch.arange(n)
        b = T5Attention._relative_position_bucket(pos[None, :] - pos[:, None], bidirectional=bidirectional,
                                                  num_buckets=model.config.relative_attention_num_buckets,
                                                  max_distance=model.config.relative_attention_max_distance)
        return len(set(b.flatten().tolist()))

    buckets, heads = model.config.relative_attention_num_buckets, model.config.num_heads
    return heads * ((buckets - reached(SEQ, True)) + (buckets - reached(T5_DECODER_SEQ, False)))


T5_DECODER_SEQ = 8
#: a causal LM of the shape ``_decoder_only`` builds, as keyword arguments
_DECODER = dict(vocab_size=1000, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=128, use_cache=False)


def _whisper_encoder() -> Any:
    cfg = T.WhisperConfig(vocab_size=1000, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                          decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, num_mel_bins=16,
                          max_source_positions=32, max_target_positions=32, pad_token_id=0, bos_token_id=1,
                          eos_token_id=2, decoder_start_token_id=1, use_cache=False)
    return T.WhisperModel(cfg).get_encoder()


FAMILIES = {f.name: f for f in (
    # rotary embeddings, RMSNorm, SwiGLU, grouped-query attention
    Family("llama", _decoder_only(T.LlamaForCausalLM, T.LlamaConfig), _tokens),
    # ... with a sliding window (16 of the 32 positions)
    Family("mistral", lambda: T.MistralForCausalLM(T.MistralConfig(
        vocab_size=1000, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, sliding_window=16, use_cache=False)), _tokens),
    # ... with biases on Q, K, V and the head tied to the embedding
    Family("qwen2", lambda: T.Qwen2ForCausalLM(T.Qwen2Config(
        vocab_size=1000, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=True, use_cache=False)),
        _tokens_and_mask),
    # learned positions at an offset, ReLU, tied head
    Family("opt", lambda: T.OPTForCausalLM(T.OPTConfig(
        vocab_size=1000, hidden_size=64, ffn_dim=256, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=128, word_embed_proj_dim=64, use_cache=False)), _tokens_and_mask),
    Family("roberta", lambda: T.RobertaModel(T.RobertaConfig(
        vocab_size=1000, hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=130)), _tokens),
    Family("albert", _albert, _tokens),
    # encoder-decoder with cross attention, all three embeddings one table
    Family("bart", lambda: T.BartModel(T.BartConfig(
        vocab_size=1000, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, max_position_embeddings=128,
        use_cache=False)), lambda: {"input_ids": _ids(), "decoder_input_ids": _ids()}),
    # two strided 1-d convolutions ahead of a transformer encoder
    Family("whisper-encoder", _whisper_encoder,
           lambda: {"input_features": torch.randn(1, 16, 64, generator=torch.Generator().manual_seed(0))}),
    Family("resnet", _resnet, _image, onnx_missing=_batch_norm_channels),
    # depthwise 7x7 convolutions, channels-last LayerNorm, layer scale
    Family("convnext", lambda: T.ConvNextModel(T.ConvNextConfig(hidden_sizes=[16, 32, 64, 128],
                                                                depths=[1, 1, 1, 1])), _image),
    Family("swin", _swin, _image),
    # 2026-12: families the first sessions did not try (each passed unchanged except
    # DeepSeek-V3 from_module: its group-limited routing's in-place ``scatter_`` was an
    # unknown operation)
    # QK-norm (an RMSNorm on each head's queries and keys), head_dim apart from hidden / heads
    Family("qwen3", lambda: T.Qwen3ForCausalLM(T.Qwen3Config(head_dim=16, **_DECODER)), _tokens),
    # fine-grained experts (8, 2 per token) with QK-norm; batched expert products, as Mixtral's
    Family("qwen3-moe", lambda: T.Qwen3MoeForCausalLM(T.Qwen3MoeConfig(
        head_dim=16, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1,
        experts_implementation="batched_mm", **_DECODER)), _tokens),
    # multi-head latent attention (low-rank Q and K/V), a dense first layer, a shared expert,
    # group-limited routing
    Family("deepseek-v3", lambda: T.DeepseekV3ForCausalLM(T.DeepseekV3Config(
        vocab_size=1000, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
        first_k_dense_replace=1, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8,
        n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1, q_lora_rank=32, kv_lora_rank=16,
        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, max_position_embeddings=128, use_cache=False,
        experts_implementation="batched_mm")), _tokens),
    # fused QKV and gate-up projections
    Family("phi3", lambda: T.Phi3ForCausalLM(T.Phi3Config(pad_token_id=0, **_DECODER)), _tokens),
    # partial rotary, parallel attention and MLP
    Family("gpt-neox", lambda: T.GPTNeoXForCausalLM(T.GPTNeoXConfig(
        vocab_size=1000, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=128, use_cache=False)), _tokens),
    # multi-query attention (one K/V head), learned positions
    Family("gpt-bigcode", lambda: T.GPTBigCodeForCausalLM(T.GPTBigCodeConfig(
        vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=128, multi_query=True, use_cache=False)),
        _tokens, onnx_missing=_unread_position_rows),
    Family("falcon", lambda: T.FalconForCausalLM(T.FalconConfig(
        vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, use_cache=False)), _tokens),
    # alternating sliding-window and global layers, soft-capped attention off, QK-norm
    Family("gemma3", lambda: T.Gemma3ForCausalLM(T.Gemma3TextConfig(head_dim=16, sliding_window=16, **_DECODER)),
           _tokens),
    # relative position buckets (a learned bias per bucket and head), no biases, ReLU
    Family("t5", lambda: T.T5Model(T.T5Config(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                              num_heads=4, use_cache=False)),
           lambda: {"input_ids": _ids(), "decoder_input_ids": _ids(seq=T5_DECODER_SEQ)},
           onnx_missing=_unread_t5_buckets),
    Family("clip-vision", lambda: T.CLIPVisionModel(T.CLIPVisionConfig(
        hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, image_size=64,
        patch_size=16)), _image),
    # a mixture of experts (4 experts, 2 per token), its experts as batched products: the
    # default grouped products export to no ONNX (a transformers custom op the exporter has
    # no function for; see test_mixture_of_experts_grouped_from_module)
    Family("mixtral", lambda: _mixtral("batched_mm"), _tokens),
)}


def _mixtral(experts: str) -> Any:
    return T.MixtralForCausalLM(T.MixtralConfig(
        vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=128,
        use_cache=False, experts_implementation=experts))
DEFAULT = ("llama", "albert", "swin", "resnet")


def randomize(model: Any, seed: int = 0) -> Any:
    """Every parameter drawn at random (as trained weights are: no two equal)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    return model.eval()


# --- the independent reference --------------------------------------------------------------
@dataclass(frozen=True)
class Reference:
    """What torch counts running the model (eager attention: the products are visible)."""

    products: int    # FLOPs of matrix products and convolutions (torch.utils.flop_counter)
    epilogues: int   # bias adds of products (and of batch norms an exporter folds), softmax of the scores


def reference(model: Any, inputs: dict[str, Any]) -> Reference:
    from torch.utils._python_dispatch import TorchDispatchMode  # noqa: PLC0415
    from torch.utils.flop_counter import FlopCounterMode  # noqa: PLC0415

    eager = copy.deepcopy(model)
    if hasattr(eager, "set_attn_implementation"):
        eager.set_attn_implementation("eager")
    biased = (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d)
    adds = [0]

    def count(module: Any, args: Any, out: Any) -> None:
        adds[0] += out.numel()

    for m in eager.modules():
        if (isinstance(m, biased) and m.bias is not None) or isinstance(m, torch.nn.BatchNorm2d):
            m.register_forward_hook(count)

    class Softmax(TorchDispatchMode):
        scores = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket in (torch.ops.aten._softmax, torch.ops.aten._safe_softmax):
                Softmax.scores += out.numel()
            return out

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter, Softmax():
        eager(**inputs)
    return Reference(counter.get_total_flops(), adds[0] + 5 * Softmax.scores)


# --- both paths ------------------------------------------------------------------------------
@dataclass
class Imported:
    graph: Any        # fused, as a user gets it
    products: float   # matrix-product FLOPs before fusion
    unknown: list[str]


def _quiet() -> Any:
    stack = contextlib.ExitStack()
    caught = stack.enter_context(warnings.catch_warnings(record=True))
    warnings.simplefilter("always")
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    return stack, caught


def import_both(model: Any, inputs: dict[str, Any], tmp_path: Any) -> dict[str, Imported]:
    path = tmp_path / "model.onnx"
    out = {}
    stack, caught = _quiet()
    with stack, torch.no_grad():
        torch.onnx.export(model, (), str(path), kwargs=inputs)
        del caught[:]   # the exporter's own warnings
        fused, fine = import_onnx(path), import_onnx(path, fuse=False)
        out["onnx"] = Imported(fused, sum(o.fwd_flops for o in fine.ops if o.kind in PRODUCTS),
                               [str(w.message) for w in caught if issubclass(w.category, UnknownOperatorWarning)])
        del caught[:]
        fused, fine = distplan.from_module(model, inputs), import_module(model, inputs, fuse=False)
        out["module"] = Imported(fused, sum(o.fwd_flops for o in fine.ops if o.kind in PRODUCTS),
                                 [str(w.message) for w in caught if issubclass(w.category, UnknownOperatorWarning)])
    return out


def check_family(name: str, tmp_path: Any, families: dict[str, Family] = FAMILIES) -> None:
    fam = families[name]
    torch.manual_seed(0)
    model = randomize(fam.build())
    inputs = fam.inputs()
    n_params = sum(p.numel() for p in model.parameters())
    ref = reference(model, inputs)
    for how, imp in import_both(model, inputs, tmp_path).items():
        g = imp.graph
        expected = n_params - (fam.onnx_missing(model) if how == "onnx" else 0)
        assert g.param_elems == expected, (how, g.param_elems, expected, n_params)
        assert ref.products <= imp.products <= ref.products + ref.epilogues, (how, imp.products, ref)
        assert not imp.unknown and not g.import_warnings, (how, imp.unknown, g.import_warnings)
        best = distplan.solve(distplan.problem(g, "dgx-a100"),
                              distplan.SolveOptions(time_limit_s=10, top_k=1)).best
        assert best is not None and best.sim.throughput_per_s > 0, how


@pytest.mark.parametrize("name", DEFAULT)
def test_family_imports_exactly_and_plans(name, tmp_path):
    check_family(name, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in FAMILIES if n not in DEFAULT])
def test_more_families_import_exactly_and_plan(name, tmp_path):
    check_family(name, tmp_path)


#: published configs (random weights) where the small ones cannot show what happens:
#: Swin-tiny's exporter leaves lookups of its relative position tables half folded
#: (``[2401, heads]`` constants) and its shifted-window masks ``[windows, 49, 49]`` (both
#: parameters before: 495,294 too many); ResNet-50's 53 batch norms fold into its
#: convolutions (26,560 parameters fewer in the file)
REAL = {f.name: f for f in (
    Family("swin-tiny", lambda: T.SwinModel(T.SwinConfig()), lambda: {"pixel_values": _pixels(224)}),
    Family("resnet-50", lambda: T.ResNetModel(T.ResNetConfig()), lambda: {"pixel_values": _pixels(224)},
           onnx_missing=_batch_norm_channels),
)}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REAL))
def test_published_configs_import_exactly_and_plan(name, tmp_path):
    check_family(name, tmp_path, REAL)


def test_mixture_of_experts_grouped_from_module():
    """Mixtral as transformers 5 runs it by default: the experts' products are one
    ``transformers.grouped_mm_fallback`` per projection (``aten._grouped_mm`` where torch
    has a kernel), its router a ``topk``, its token sort ``sort`` / ``histc``: unknown
    operations before (costed 4 FLOPs per touched element, the experts' products out of the
    product count). Now products of 2 x tokens x top-k x K x N FLOPs: the product count
    is the batched-experts model's (which the flop counter sees), less nothing, plus the
    fused attention's softmax."""
    torch.manual_seed(0)
    model = randomize(_mixtral("grouped_mm"))
    inputs = _tokens()
    batched = copy.deepcopy(model)
    batched.config._experts_implementation = "batched_mm"
    ref = reference(batched, inputs)
    stack, caught = _quiet()
    with stack:
        g = import_module(model, inputs, fuse=False)
    assert not [w for w in caught if issubclass(w.category, UnknownOperatorWarning)] and not g.import_warnings
    assert g.param_elems == sum(p.numel() for p in model.parameters())
    products = sum(o.fwd_flops for o in g.ops if o.kind in PRODUCTS)
    assert ref.products <= products <= ref.products + ref.epilogues, (products, ref)
    experts = [o for o in g.ops if o.name.startswith("grouped_mm")]
    assert len(experts) == 4 and sum(o.fwd_flops for o in experts) == 2 * 2 * SEQ * 2 * 64 * 128 * 3


# --- focused: the rules those families needed (hand-built ONNX graphs) ----------------------
def _model(nodes: list, inputs: list, outputs: list, inits: dict[str, Any], kinds: dict[str, str] | None = None):
    """An ONNX model with float initializers ``inits`` (name -> array); ``kinds`` records
    what torch.export called each (as the dynamo exporter does)."""
    tensors = [numpy_helper.from_array(np.asarray(a, dtype=np.float32), name=n) for n, a in inits.items()]
    g = helper.make_graph(nodes, "m", inputs, outputs, initializer=tensors)
    for n, kind in (kinds or {}).items():
        vi = helper.make_tensor_value_info(n, TensorProto.FLOAT, list(np.shape(inits[n])))
        entry = vi.metadata_props.add()
        entry.key, entry.value = "pkg.torch.export.graph_signature.InputSpec.kind", kind
        g.value_info.append(vi)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])


def _vi(name: str, dims: list[int]) -> Any:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def _rng(seed: int = 0) -> Any:
    return np.random.default_rng(seed)


def _rotary_model(cos: Any, sin: Any) -> Any:
    """q (1, 2, 8, 4) -> q * cos + rotate_half(q) * sin (rotate_half as a second input)."""
    nodes = [helper.make_node("Mul", ["q", "cos"], ["a"]), helper.make_node("Mul", ["r", "sin"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    return _model(nodes, [_vi("q", [1, 2, 8, 4]), _vi("r", [1, 2, 8, 4])], [_vi("y", [1, 2, 8, 4])],
                  {"cos": cos, "sin": sin})


def test_folded_rotary_tables_are_not_parameters():
    """Llama's cos / sin tables, computed from the ``inv_freq`` buffer and the positions and
    folded by the exporter (1,024 elements counted as parameters before), are position
    encodings; two random weights of the same shape, or two sign patterns of one magnitude,
    are parameters."""
    pos = np.arange(8)[:, None] * (1.0 / 10000 ** (np.arange(0, 4, 2) / 4))[None, :]
    angles = np.concatenate([pos, pos], axis=-1)[None, None]             # (1, 1, 8, 4)
    assert import_onnx(_rotary_model(np.cos(angles), np.sin(angles))).param_elems == 0
    scaled = 0.7 * np.cos(angles), 0.7 * np.sin(angles)                # an attention scaling of 0.7
    assert import_onnx(_rotary_model(*scaled)).param_elems == 0
    w = _rng().normal(size=(2, 1, 1, 8, 4)) * 0.02
    assert import_onnx(_rotary_model(w[0], w[1])).param_elems == 64
    signs = np.sign(_rng(1).normal(size=(2, 1, 1, 8, 4))) * 0.5
    assert import_onnx(_rotary_model(signs[0], signs[1])).param_elems == 64


def test_cos_and_sin_of_a_buffer_are_not_parameters():
    """A rotary table computed in the graph (``Cos(positions x inv_freq)``), all from
    constants: folded by the importer, and what ``Cos`` / ``Sin`` make of constants is a
    position encoding, not the parameters it was computed from."""
    nodes = [helper.make_node("MatMul", ["pos", "inv_freq"], ["f"]), helper.make_node("Cos", ["f"], ["cos"]),
             helper.make_node("Sin", ["f"], ["sin"]), helper.make_node("Mul", ["q", "cos"], ["a"]),
             helper.make_node("Mul", ["q", "sin"], ["b"]), helper.make_node("Add", ["a", "b"], ["y"])]
    m = _model(nodes, [_vi("q", [8, 4])], [_vi("y", [8, 4])],
               {"pos": np.arange(8.0)[:, None], "inv_freq": 1.0 / 10000 ** (np.arange(4)[None, :] / 4)})
    assert import_onnx(m).param_elems == 0


def test_alibi_slopes_are_not_parameters():
    """BLOOM's per-head ALiBi slopes (``2**(-8k/n)``), folded from the head count: 4 extra
    parameters before; a random vector of the same shape is a parameter."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor  # noqa: PLC0415

    for heads in (4, 12):
        slopes = build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), heads, torch.float32)[:, 0, 1].numpy()
        for values, params in ((slopes, 0), (_rng(heads).uniform(0.1, 0.9, size=heads), heads)):
            m = _model([helper.make_node("Mul", ["x", "s"], ["y"])], [_vi("x", [heads, 6])], [_vi("y", [heads, 6])],
                       {"s": np.asarray(values).reshape(heads, 1)})
            assert import_onnx(m).param_elems == params, heads


def test_batch_norm_statistics_are_not_parameters():
    """A batch norm's running mean and variance are buffers (+2 C parameters before, with
    either exporter, wherever the norm is not folded into a convolution)."""
    c = 8
    rng = _rng()
    stats = {"scale": rng.uniform(0.5, 1.5, c), "bias": rng.normal(size=c), "mean": rng.normal(size=c),
             "var": rng.uniform(0.5, 1.5, c)}
    node = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"])
    g = import_onnx(_model([node], [_vi("x", [2, c, 4, 4])], [_vi("y", [2, c, 4, 4])], stats))
    assert g.param_elems == 2 * c


def test_batch_norm_statistics_from_torch_both_exporters(tmp_path):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.BatchNorm1d(32),
                            torch.nn.Linear(32, 8)).eval()
    with torch.no_grad():
        for t in list(m.parameters()) + [m[2].running_mean, m[2].running_var]:
            t.copy_(torch.rand(t.shape) + 0.5)
    x = torch.randn(4, 16)
    n = sum(p.numel() for p in m.parameters())
    for dynamo in (True, False):
        path = tmp_path / f"bn-{dynamo}.onnx"
        stack, _ = _quiet()
        with stack:
            torch.onnx.export(m, (x,), str(path), dynamo=dynamo)
        assert import_onnx(path).param_elems == n, dynamo
    assert distplan.from_module(m, x).param_elems == n


def _scores_plus(constant_nodes: list, bias: str, inits: dict[str, Any], kinds: dict[str, str] | None = None) -> Any:
    """Scores q @ k^T (1, H=2, 16, 16), plus a constant ``bias`` computed by ``constant_nodes``
    from ``inits``, viewed as (1, 2, 16, 16) like the scores, then a softmax."""
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]), *constant_nodes,
             helper.make_node("Reshape", [bias, "shape"], ["b4"]), helper.make_node("Add", ["s", "b4"], ["sb"]),
             helper.make_node("Softmax", ["sb"], ["p"], axis=-1)]
    shape = numpy_helper.from_array(np.array([1, 2, 16, 16], dtype=np.int64), name="shape")
    m = _model(nodes, [_vi("q", [1, 2, 16, 8]), _vi("kt", [1, 2, 8, 16])], [_vi("p", [1, 2, 16, 16])], inits, kinds)
    m.graph.initializer.append(shape)
    return m


def _window_table() -> tuple[Any, Any]:
    """(Swin's relative position table for 4 x 4 windows and 2 heads, (49, 2); the index of
    the entry each of the 16 x 16 position pairs reads, (256,))."""
    coords = np.stack(np.meshgrid(np.arange(4), np.arange(4), indexing="ij")).reshape(2, -1)
    rel = coords[:, :, None] - coords[:, None, :] + 3
    return _rng().normal(size=(49, 2)) * 0.02, (rel[0] * 7 + rel[1]).reshape(-1)


def test_position_bias_folded_with_its_lookup_counts_its_table():
    """Swin's relative position table (49 x 2 here) looked up for every pair of positions in
    a window: the exporter folds the lookup into a ``[256, 2]`` constant that repeats each
    entry. It is 98 parameters (its distinct values), not 512 (Swin-tiny: 495,294 too many
    with the masks below), nor 0 (a mask)."""
    table, index = _window_table()
    looked = table[index]                                                  # (256, 2): what the file holds
    g = import_onnx(_scores_plus([helper.make_node("Transpose", ["looked"], ["lt"], perm=[1, 0])], "lt",
                                 {"looked": looked}))
    assert g.param_elems == 98
    # a table the exporter kept, looked up by a Gather the importer folds, is itself the parameter
    idx = numpy_helper.from_array(index.astype(np.int64), name="index")
    m = _scores_plus([helper.make_node("Gather", ["table", "index"], ["looked"], axis=0),
                      helper.make_node("Transpose", ["looked"], ["lt"], perm=[1, 0])], "lt", {"table": table})
    m.graph.initializer.append(idx)
    assert import_onnx(m).param_elems == 98


def test_window_mask_added_to_viewed_scores_is_not_a_parameter():
    """Swin's shifted-window mask (differences of region ids, whole numbers, then -100 where
    the regions differ) is added to scores viewed per window, after the position bias: a
    mask, whatever its leading size; so are masks of ``finfo.min``."""
    regions = np.repeat(np.arange(4.0), 4)
    sub = (regions[:, None] - regions[None, :])[None].repeat(2, axis=0)    # (2, 16, 16), leading size 2
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Add", ["s", "bias"], ["sb"]),
             helper.make_node("Reshape", ["sb", "shape"], ["sw"]), helper.make_node("Add", ["sw", "sub"], ["sm"]),
             helper.make_node("Softmax", ["sm"], ["p"], axis=-1)]
    bias = _rng().normal(size=(1, 2, 16, 16)) * 0.02
    m = _model(nodes, [_vi("q", [1, 2, 16, 8]), _vi("kt", [1, 2, 8, 16])], [_vi("p", [2, 16, 16])],
               {"bias": bias, "sub": sub})
    m.graph.initializer.append(numpy_helper.from_array(np.array([2, 16, 16], dtype=np.int64), name="shape"))
    assert import_onnx(m).param_elems == 2 * 256      # the learned bias (all distinct), not the mask
    causal = np.triu(np.full((16, 16), np.finfo(np.float32).min), 1)[None, None].repeat(2, axis=1)
    assert import_onnx(_scores_plus([], "causal", {"causal": causal})).param_elems == 0
    # a shifted block's bias and mask, folded into one constant over 2 windows: the table's
    # 98 entries where attended, each less 100 where masked (window 1)
    table, index = _window_table()
    bias = table[index].T.reshape(2, 16, 16)
    both = np.stack([bias, bias + np.where(sub[0] != 0, -100.0, 0.0)])     # (2 windows, 2 heads, 16, 16)
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Add", ["s", "both"], ["sb"]),
             helper.make_node("Softmax", ["sb"], ["p"], axis=-1)]
    m = _model(nodes, [_vi("q", [2, 2, 16, 8]), _vi("kt", [2, 2, 8, 16])], [_vi("p", [2, 2, 16, 16])],
               {"both": both})
    assert import_onnx(m).param_elems == 98


def test_what_torch_export_recorded_decides():
    """The dynamo exporter records each named initializer's kind: a buffer is not a
    parameter, a one-element parameter is (a learned scalar), a one-element constant is
    not, and a constant-filled initializer it does not call a parameter (a mask of ones)
    is a constant, where without the record each reader owns a copy (merged zero biases),
    and so does a product reading one (a zero-initialised weight, transposed and folded)."""
    def model(kinds: dict[str, str] | None) -> Any:
        inits = {"w": _rng().normal(size=(4, 4)), "buf": _rng(1).normal(size=4), "alpha": np.array([0.3]),
                 "half": np.array([0.5]), "ones": np.ones(4)}
        nodes = [helper.make_node("MatMul", ["x", "w"], ["a"]), helper.make_node("Add", ["a", "buf"], ["b"]),
                 helper.make_node("Mul", ["b", "alpha"], ["c"]), helper.make_node("Mul", ["c", "half"], ["d"]),
                 helper.make_node("Mul", ["d", "ones"], ["y"])]
        return _model(nodes, [_vi("x", [2, 4])], [_vi("y", [2, 4])], inits, kinds)

    recorded = {"w": "PARAMETER", "buf": "BUFFER", "alpha": "PARAMETER"}
    assert import_onnx(model(recorded)).param_elems == 16 + 1
    assert import_onnx(model(None)).param_elems == 16 + 4 + 4    # w, buf, and the copy of ones
    # a zero weight matrix the exporter transposed (unnamed), read by a product: a parameter
    nodes = [helper.make_node("MatMul", ["x", "wt"], ["a"]), helper.make_node("Add", ["a", "b"], ["y"])]
    m = _model(nodes, [_vi("x", [2, 4])], [_vi("y", [2, 4])], {"wt": np.zeros((4, 4)), "b": _rng().normal(size=4)},
               {"b": "PARAMETER"})
    assert import_onnx(m).param_elems == 16 + 4
