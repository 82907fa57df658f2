"""Issue 21's acceptance check: the planner's own figure for each plan it returns against
the realistic simulation of that plan (link latency, FIFO links, the stream's flow
control, the 1F1B window): the MILP period vs ``SimResult.period_s`` for pipeline plans,
the analytic iteration (``predicted['model_iteration_s']``) vs ``SimResult.iteration_s``
for cluster plans. Target: median |gap| <= 2 %, worst <= 5 % (gap = sim / model - 1).

Cases: the top plans (``--top-k``, 3) of every zoo model on mcm4x4 and dgx-a100, both
modes, and ``transformers`` families (random weights, nothing downloaded) through both
ONNX exporters (``legacy``, ``dynamo``), inference on both topologies. Rows where the
realistic run pays something the model leaves out carry a note.

    python bench/milp_vs_sim.py                     # every zoo model and every import family
    python bench/milp_vs_sim.py --quick             # a few of each (a few minutes)
    python bench/milp_vs_sim.py --zoo-only | --imports-only
    python bench/milp_vs_sim.py --families bert,gpt2 --exporters legacy
"""
from __future__ import annotations

import argparse
import contextlib
import io
import math
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import distplan  # noqa: E402
from distplan.core.errors import DistplanError  # noqa: E402

TOPOLOGIES = ("mcm4x4", "dgx-a100")
MODES = ("inference", "training")
#: the catalogue's named models (the parametric gpt3-/llama-<h>x<l>x<h> are not rows)
ZOO = ("mlp-xs", "mlp-small", "mlp-medium", "mlp-large", "bert-base", "bert-large", "gpt2", "gpt2-medium",
       "gpt2-large", "gpt2-xl", "gpt3-125m", "gpt3-350m", "gpt3-760m", "gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b",
       "gpt3-13b", "gpt3-175b", "llama-7b", "llama-13b", "llama-65b", "llama2-70b")
QUICK_ZOO = ("bert-base", "gpt2", "gpt3-1.3b")
TARGET_MEDIAN, TARGET_WORST = 0.02, 0.05
EXPORTERS = ("legacy", "dynamo")
SEQ = 128   # tokens per sample for every import (BERT's default; decoders too, so all fit mcm4x4)


@dataclass
class Row:
    case: str          # zoo name, or family/exporter
    topology: str
    mode: str
    rank: int          # 0: no plan
    figure: str        # "period" (MILP vs sim) or "iteration" (analytic vs sim)
    model_s: float
    sim_s: float
    note: str = ""

    @property
    def gap(self) -> float:
        return self.sim_s / self.model_s - 1 if self.rank and self.model_s > 0 and math.isfinite(self.sim_s) \
            else math.nan


def plan_rows(case: str, workload: Any, topology: str, mode: str, time_limit_s: float, top_k: int) -> list[Row]:
    """The top plans of one problem, each with its model figure and its realistic simulated
    one; one rank-0 row with the reason when nothing plans."""
    topo_name = getattr(topology, "name", topology)
    try:
        p = distplan.problem(workload, topology, mode=mode)
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = distplan.solve(p, distplan.SolveOptions(time_limit_s=time_limit_s, top_k=top_k))
    except DistplanError as e:
        return [Row(case, topo_name, mode, 0, "-", math.nan, math.nan, str(e).split(";")[0][:110])]
    rows = []
    for x in r.plans:
        pred = dict(x.plan.predicted or {})
        cluster = not math.isfinite(x.milp_period_s) and r.solver.analytic   # the space's figure: its iteration
        if x.sim is None:
            rows.append(Row(case, topo_name, mode, x.rank, "-", math.nan, math.nan, "not simulated (time limit)"))
        elif cluster:
            pl = x.plan
            row = Row(case, topo_name, mode, x.rank, "iteration", pred["model_iteration_s"], x.sim.iteration_s,
                      f"{pred.get('cluster_point', '')}; {pl.dp_allreduce} reduction"
                      + (", overlapped" if pl.overlap_grad_reduce else ""))
            if abs(row.gap) > 0.005 and pl.overlap_grad_reduce and any(st.tensor_parallel > 1 for st in pl.stages):
                row.note += (" -- not modelled: the overlapped buckets' transfers contend with the backward's "
                             "tensor-parallel all-reduces on the same links (README, analytic iteration)")
            rows.append(row)
        else:
            rows.append(Row(case, topo_name, mode, x.rank, "period", x.milp_period_s, x.sim.period_s,
                            f"{x.plan.n_stages} stages x {x.plan.stages[0].replicas} lanes"))
    for _, why in r.dropped:
        rows.append(Row(case, topo_name, mode, 0, "-", math.nan, math.nan, f"dropped: {why[:100]}"))
    return rows or [Row(case, topo_name, mode, 0, "-", math.nan, math.nan, "no plan returned")]


# --- transformers families -------------------------------------------------------------
def _ids(vocab: int, b: int, s: int) -> Any:
    import torch  # noqa: PLC0415

    return torch.randint(0, vocab, (b, s), generator=torch.Generator().manual_seed(0))


def _mask(b: int, s: int) -> Any:
    import torch  # noqa: PLC0415

    return torch.ones(b, s, dtype=torch.long)


@dataclass(frozen=True)
class Family:
    """A ``transformers`` model: its config (published size unless ``small`` says why not)
    and its usual inputs (what a tokenizer hands it: ids and the attention mask)."""

    name: str
    build: Callable[[], Any]
    inputs: Callable[[Any, int, int], dict[str, Any]]
    size: str   # what config, and why when not the published one


def _enc_inputs(cfg: Any, b: int, s: int) -> dict[str, Any]:
    return {"input_ids": _ids(cfg.vocab_size, b, s), "attention_mask": _mask(b, s)}


def _seq2seq_inputs(cfg: Any, b: int, s: int) -> dict[str, Any]:
    return {"input_ids": _ids(cfg.vocab_size, b, s), "attention_mask": _mask(b, s),
            "decoder_input_ids": _ids(cfg.vocab_size, b, s), "decoder_attention_mask": _mask(b, s)}


def _families() -> dict[str, Family]:
    import transformers as tf  # noqa: PLC0415

    def causal(cls, cfg):
        return lambda: cls(cfg)

    return {f.name: f for f in [
        Family("bert", lambda: tf.BertModel(tf.BertConfig()), _enc_inputs, "bert-base-uncased"),
        Family("roberta", lambda: tf.RobertaModel(tf.RobertaConfig(vocab_size=50265, max_position_embeddings=514,
                                                                   type_vocab_size=1)), _enc_inputs, "roberta-base"),
        Family("distilbert", lambda: tf.DistilBertModel(tf.DistilBertConfig()), _enc_inputs,
               "distilbert-base-uncased"),
        Family("albert", lambda: tf.AlbertModel(tf.AlbertConfig(hidden_size=768, num_attention_heads=12,
                                                                intermediate_size=3072)), _enc_inputs,
               "albert-base-v2"),
        Family("gpt2", causal(tf.GPT2LMHeadModel, tf.GPT2Config(use_cache=False)), _enc_inputs, "gpt2 (124 M)"),
        Family("opt", causal(tf.OPTForCausalLM, tf.OPTConfig(hidden_size=768, num_hidden_layers=12,
                                                             ffn_dim=3072, num_attention_heads=12, use_cache=False)),
               _enc_inputs, "facebook/opt-125m"),
        Family("llama", causal(tf.LlamaForCausalLM, tf.LlamaConfig(
            hidden_size=512, intermediate_size=1408, num_hidden_layers=8, num_attention_heads=8,
            num_key_value_heads=4, vocab_size=32000, use_cache=False)), _enc_inputs,
            "small: 8 layers, hidden 512, GQA 8/4 (Llama-7B's 13 GB of fp16 weights fit no chiplet mesh)"),
        Family("mistral", causal(tf.MistralForCausalLM, tf.MistralConfig(
            hidden_size=512, intermediate_size=1408, num_hidden_layers=8, num_attention_heads=8,
            num_key_value_heads=4, vocab_size=32000, sliding_window=64, use_cache=False)), _enc_inputs,
            "small: 8 layers, hidden 512, GQA 8/4, sliding window 64 (as Llama)"),
        Family("t5-encoder", lambda: tf.T5EncoderModel(tf.T5Config(d_model=512, d_ff=2048, d_kv=64, num_heads=8,
                                                                   num_layers=6)), _enc_inputs,
               "t5-small's encoder"),
        Family("bart", lambda: tf.BartModel(tf.BartConfig(d_model=768, encoder_layers=6, decoder_layers=6,
                                                          encoder_attention_heads=12, decoder_attention_heads=12,
                                                          encoder_ffn_dim=3072, decoder_ffn_dim=3072,
                                                          use_cache=False)), _seq2seq_inputs, "facebook/bart-base"),
    ]}


FAMILIES = ("bert", "roberta", "distilbert", "albert", "gpt2", "opt", "llama", "mistral", "t5-encoder", "bart")
QUICK_FAMILIES = ("bert", "gpt2", "llama")


def _randomize(model: Any) -> Any:
    """Every parameter drawn at random (as trained weights are: no two equal, so the
    importer's ties-by-value see only real ties)."""
    import torch  # noqa: PLC0415

    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    return model.eval()


class _ByPosition:
    """The legacy exporter passes arguments by position; the model takes keywords."""

    def __new__(cls, model: Any, names: tuple[str, ...]) -> Any:
        import torch  # noqa: PLC0415

        class Wrap(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, *args: Any) -> Any:
                out = self.model(**dict(zip(names, args)))
                return out.to_tuple() if hasattr(out, "to_tuple") else out

        return Wrap()


def export(family: Family, exporter: str, folder: Path, seq: int = SEQ) -> Path:
    """``torch.onnx.export`` of the family's model (default settings otherwise), cached."""
    import torch  # noqa: PLC0415

    path = folder / f"{family.name}-{exporter}-{seq}.onnx"
    if path.exists():
        return path
    torch.manual_seed(0)
    model = _randomize(family.build())
    inputs = family.inputs(model.config, 1, seq)
    tmp = path.with_suffix(".part.onnx")
    with warnings.catch_warnings(), torch.no_grad(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            torch.onnx.export(model, (), str(tmp), kwargs=inputs)
        else:
            torch.onnx.export(_ByPosition(model, tuple(inputs)), tuple(inputs.values()), str(tmp), dynamo=False)
    tmp.rename(path)
    return path


def import_rows(name: str, exporter: str, folder: Path, topologies: tuple[str, ...], time_limit_s: float,
                top_k: int) -> list[Row]:
    from distplan.workloads.onnx_import import import_onnx  # noqa: PLC0415

    case = f"{name}/{exporter}"
    try:
        path = export(_families()[name], exporter, folder)
    except Exception as e:   # noqa: BLE001 -- an exporter's failure is a row, not the end of the bench
        return [Row(case, t, "inference", 0, "-", math.nan, math.nan, f"export failed: {type(e).__name__}: "
                    f"{str(e).splitlines()[0][:80]}") for t in topologies]
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        g = import_onnx(path, mode="inference")
    return [r for t in topologies for r in plan_rows(case, g, t, "inference", time_limit_s, top_k)]


# --- the table ---------------------------------------------------------------------------
def summary(rows: list[Row]) -> tuple[int, float, float, Row | None]:
    """(rows compared, median |gap|, worst |gap|, the worst row)."""
    gaps = [(abs(r.gap), r) for r in rows if math.isfinite(r.gap)]
    if not gaps:
        return 0, math.nan, math.nan, None
    worst = max(gaps, key=lambda x: x[0])
    return len(gaps), statistics.median(g for g, _ in gaps), worst[0], worst[1]


def format_row(r: Row) -> str:
    if not r.rank:
        return f"| {r.case} | {r.topology} | {r.mode} | - | - | - | - | - | {r.note} |"
    return (f"| {r.case} | {r.topology} | {r.mode} | {r.rank} | {r.figure} | {r.model_s:.6g} | {r.sim_s:.6g} | "
            f"{100 * r.gap:+.2f} % | {r.note} |")


HEADER = ("| case | topology | mode | rank | figure | model s | sim s | gap | note |\n"
          "|---|---|---|---|---|---|---|---|---|")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a few zoo models and families")
    ap.add_argument("--zoo-only", action="store_true")
    ap.add_argument("--imports-only", action="store_true")
    ap.add_argument("--zoo", help="comma-separated zoo models (default: every named one)")
    ap.add_argument("--families", help=f"comma-separated families (default: {','.join(FAMILIES)})")
    ap.add_argument("--exporters", default=",".join(EXPORTERS))
    ap.add_argument("--topologies", default=",".join(TOPOLOGIES))
    ap.add_argument("--modes", default=",".join(MODES), help="zoo modes (imports: inference)")
    ap.add_argument("--time-limit", type=float, default=20.0, help="seconds per solve")
    ap.add_argument("--top-k", type=int, default=3)
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "distplan-milp-vs-sim"),
                    help="folder for the ONNX exports (reused)")
    args = ap.parse_args()
    topos = tuple(args.topologies.split(","))
    rows: list[Row] = []
    t0 = time.perf_counter()
    print(HEADER, flush=True)

    def emit(new: list[Row]) -> None:
        for r in new:
            print(format_row(r), flush=True)
        rows.extend(new)

    if not args.imports_only:
        names = args.zoo.split(",") if args.zoo else (QUICK_ZOO if args.quick else ZOO)
        for name in names:
            for t in topos:
                for mode in args.modes.split(","):
                    emit(plan_rows(name, name, t, mode, args.time_limit, args.top_k))
    zoo_rows = list(rows)
    if not args.zoo_only:
        folder = Path(args.cache)
        folder.mkdir(parents=True, exist_ok=True)
        fams = args.families.split(",") if args.families else (QUICK_FAMILIES if args.quick else FAMILIES)
        for name in fams:
            for exporter in args.exporters.split(","):
                emit(import_rows(name, exporter, folder, topos, args.time_limit, args.top_k))
    print()
    for label, part in (("zoo", zoo_rows), ("imports", rows[len(zoo_rows):]), ("all", rows)):
        n, med, worst, w = summary(part)
        if n:
            print(f"{label}: {n} plans compared, median |gap| {100 * med:.2f} % (target <= {100 * TARGET_MEDIAN:.0f} %),"
                  f" worst {100 * worst:.2f} % (target <= {100 * TARGET_WORST:.0f} %): {w.case} on {w.topology} "
                  f"{w.mode} rank {w.rank}")
    if not args.zoo_only:
        fams = _families()
        print("import configs: " + "; ".join(f"{n}: {fams[n].size}" for n in fams
                                             if n in (args.families.split(",") if args.families else
                                                      (QUICK_FAMILIES if args.quick else FAMILIES))))
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
