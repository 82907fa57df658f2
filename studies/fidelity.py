"""Fidelity against published measurements: large GPT training runs on A100 clusters,
Llama 3 fp8 runs and Qwen3 MoE expert-parallel runs on H100 clusters, simulated through the what-if path
(``api.configs.whatif``) and compared with the figure their source reports.

Every row is a published configuration with its citation (``Row``); nothing is fitted
per row (device figures are the presets', ``topologies.kinds``). Compared: ``iteration_s``
(Korthikanti et al. 2022), ``paper_tflops`` (Narayanan et al. 2021, Eq. 3) and
``tokens_per_gpu_s`` (NVIDIA's Megatron-Bridge DGX-H100 tables). ``stored`` is the
simulated figure this module last produced; ``tests/test_fidelity.py`` keeps it from
drifting. ``--markdown PATH`` writes the table between the ``BEGIN`` / ``END`` markers of
PATH and names the rows whose ``stored`` moved. Run
``python -m distplan.studies.fidelity [--rows K1,K2] [--json] [--markdown [PATH]] [--cap-s S]``.

The table and how to regenerate it: docs/concepts/fidelity.md.
"""
from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from distplan.api.configs import whatif
from distplan.core.errors import DistplanError

NARAYANAN = ("Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU Clusters "
             "Using Megatron-LM (SC21)")
NARAYANAN_URL = "https://arxiv.org/abs/2104.04473"
KORTHIKANTI = "Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer Models (MLSys23)"
KORTHIKANTI_URL = "https://arxiv.org/abs/2205.05198"
#: both containers' tables are on the archive page (the latest page moves with each release)
NEMO = "NVIDIA NeMo Framework 25.11, Megatron-Bridge performance summary, DGX-H100 pre-training"
NEMO_2602 = "NVIDIA NeMo Framework 26.02, Megatron-Bridge performance summary, DGX-H100 pre-training"
NEMO_2509 = "NVIDIA NeMo Framework 25.09, Megatron-Bridge performance summary, DGX-H100 pre-training"
NEMO_URL = "https://docs.nvidia.com/nemo/megatron-bridge/latest/performance-summary-archive.html"
#: NeMo AutoModel (the PyTorch FSDP2 backend): one DGX-H100 BF16 pre-training table, its recipes in the
#: repository's examples/benchmark/configs
AUTOMODEL = "NVIDIA NeMo AutoModel, performance summary, DGX-H100 BF16 pre-training"
AUTOMODEL_URL = "https://docs.nvidia.com/nemo/automodel/latest/performance-summary.html"
#: both papers: sequence 2048, vocabulary 51,200 (the zoo's GPT-3 graphs use 50,257)
SEQ_LEN = 2048
PAPER_VOCAB = 51200
DEFAULT_CAP_S = 900.0
#: marker comments around the generated block in a Markdown page (invisible when rendered)
BEGIN = "<!-- fidelity-table:begin (generated: python -m distplan.studies.fidelity --markdown PATH) -->"
END = "<!-- fidelity-table:end -->"
#: the wall-time cap's alarm repeats at this interval (seconds) until the row returns
ALARM_REPEAT_S = 0.05
#: relative drift of a simulated figure from ``Row.stored`` that counts as moved
DRIFT_REL = 1e-6


@dataclass(frozen=True)
class Row:
    """One published run. ``metric`` is ``iteration_s`` or ``paper_tflops``; ``stored``
    the simulated figure last recorded (None: not run yet)."""

    key: str
    source: str
    url: str
    table: str
    hidden: int
    layers: int
    heads: int
    tp: int
    pp: int
    dp: int
    microbatch: int
    global_batch: int
    recompute: str
    sequence_parallel: bool
    metric: str
    published: float
    stored: float | None = None
    note: str = ""
    kind: str = "a100"
    seq_len: int = SEQ_LEN
    vocab: int = PAPER_VOCAB
    #: model chunks per pipeline stage (Megatron's interleaved 1F1B when > 1): set only
    #: where the row's paper states the published run used it
    vp: int = 1
    #: the zoo model by name (None: the GPT-3-shaped decoder of hidden x layers x heads)
    model: str | None = None
    precision: str = "bf16"
    #: context-parallel ranks per replica (the sequence split over them; GPUs = tp pp cp dp)
    cp: int = 1
    #: ZeRO level over the dp x cp replicas (1: Megatron's distributed optimizer, 3: FSDP)
    zero: int = 0
    #: the attention core (None: the what-if's default, explicit unless cp > 1)
    attention: str | None = None
    #: the checker's memory bound refuses the run before it is simulated; False only where
    #: the published run fits and the note says by how much the bound is over (the
    #: simulated peak is reported and checked against the GPU either way)
    check_memory: bool = True
    #: expert-parallel ranks among the dp replicas (a zoo MoE model's routed experts split over them)
    ep: int = 1
    #: tensor-parallel communication pipelined with the GEMMs (Transformer Engine userbuffers,
    #: ``costs.tp_overlap``): set only where the row's recipe configures it
    tp_comm_overlap: bool = False
    #: the MoE token dispatcher and routing (``costs.expert_parallel``): as the row's recipe runs them
    dispatcher: str = "alltoall"
    routing: str = "uniform"

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def workload(self) -> str:
        """The zoo's decoder (workloads/zoo/catalog.py): ``model``, else the GPT-3-shaped one of this size."""
        if self.model is not None:
            return self.model
        return "gpt3-175b" if (self.hidden, self.layers, self.heads) == (12288, 96, 96) else \
            f"gpt3-{self.hidden}x{self.layers}x{self.heads}"

    @property
    def topology(self) -> str:
        return f"{self.kind}x{self.gpus}"

    def describe(self) -> str:
        sp = " +SP" if self.sequence_parallel else ""
        vp = f" vp{self.vp}" if self.vp > 1 else ""
        cp = f" cp{self.cp}" if self.cp > 1 else ""
        cp += f" ep{self.ep}" if self.ep > 1 else ""
        extra = "".join(f", {x}" for x in (self.precision if self.precision != "bf16" else "",
                                           f"ZeRO-{self.zero}" if self.zero else "",
                                           f"seq {self.seq_len}" if self.seq_len != SEQ_LEN else "") if x)
        return (f"h{self.hidden} L{self.layers} a{self.heads}, tp{self.tp} pp{self.pp}{vp}{cp} dp{self.dp} = "
                f"{self.gpus} GPUs, "
                f"mb {self.microbatch} gb {self.global_batch}, recompute {self.recompute}{sp}{extra}")


def paper_flops(row: Row) -> float:
    """FLOPs of one iteration as Narayanan et al. count them (Eq. 3: matmuls only, the
    recomputed forward included)."""
    B, s, l, h, V = row.global_batch, row.seq_len, row.layers, row.hidden, row.vocab
    return 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


_N = dict(source=NARAYANAN, url=NARAYANAN_URL, recompute="full", sequence_parallel=False,
          metric="paper_tflops", microbatch=1)
_K = dict(source=KORTHIKANTI, url=KORTHIKANTI_URL, dp=1, metric="iteration_s")
_INTERLEAVED = ("published run used the interleaved 1F1B schedule (3 chunks per stage); the row keeps vp 1 (plain "
                "1F1B) until that is checked against the paper's text (--vp 3 runs the interleaved sensitivity)")
_MB = "microbatch size not published for Table 1; 1 assumed (as Table 2's PTD-P rows)"

_NEMO_NOTE = ("Megatron-Bridge performance recipe (scripts/performance/configs/llama): the table gives tp/pp/cp/vp, "
              "mb, gb, FSDP and the precision; no activation recomputation in the H100 preset (none assumed); "
              "sequence parallelism with tp > 1 and the distributed optimizer (ZeRO-1) are the Megatron-Bridge "
              "recipes' defaults (assumed); fused (flash) attention; tensor-parallel communication overlapped "
              "with the GEMMs where the recipe sets userbuffers (scripts/performance/configs/llama3/"
              "llama3_llm_pretrain.py: tp_comm_overlap_cfg for the 70B and 405B H100 presets), simulated with "
              "--tp-comm-overlap (tp chunks, no SM-sharing slowdown: costs.tp_overlap)")

_MOE_NOTE = ("Megatron-Bridge performance recipe (scripts/performance/configs/qwen3; v0.1.0rc3 for 25.09, v0.2.0 "
             "for 25.11): expert tensor parallel 1, the alltoall dispatcher, grouped GEMM, no recomputation, no CUDA "
             "graphs on H100, the distributed optimizer (ZeRO-1: the experts over their dp / ep = 1 replicas); the "
             "25.11 recipe overlaps the all-to-alls (moe_a2a_overlap), which the simulator does not")
_TOKENDROP = ("; token drop (apply_moe_token_drop: capacity factor 1.0, padded to capacity); the 25.09 table has no "
              "precision column: its recipe matrix gives mbs 2 only for fp8_cs (bf16: mbs 1), so fp8")
_AUTOMODEL_NOTE = ("NeMo AutoModel benchmark recipe (github.com/NVIDIA-NeMo/Automodel, examples/benchmark/configs/"
                   "{recipe}): FSDP2 over the data-parallel ranks, activation checkpointing on (each decoder "
                   "layer recomputed: full), Transformer Engine attention and linears (fused attention), the DeepEP "
                   "dispatcher (--ep-dispatcher deepep), fake_balanced_gate (token t to experts 8t..8t+7: --routing "
                   "contiguous; every expert its even share, capacity factor 1), bf16")
_QWEN3 = dict(model="qwen3-30b-a3b", hidden=2048, layers=48, heads=32, tp=1, pp=2, vp=24, dp=8, ep=8, zero=1,
              microbatch=2, global_batch=512, recompute="none", sequence_parallel=False, precision="fp8",
              attention="flash", seq_len=4096, vocab=151936, kind="h100", metric="tokens_per_gpu_s")

ROWS: tuple[Row, ...] = (
    Row("K1", table="Table 5 (config Table 3), selective recompute + SP", hidden=6144, layers=48, heads=64, tp=8,
        pp=1, microbatch=4, global_batch=4, recompute="selective", sequence_parallel=True, published=1.10,
        stored=1.010133405581311, **_K),
    Row("K2", table="Table 5 (config Table 3), full recompute", hidden=6144, layers=48, heads=64, tp=8, pp=1,
        microbatch=4, global_batch=4, recompute="full", sequence_parallel=False, published=1.42,
        stored=1.3045364291304389, **_K),
    Row("K3", table="Table 5 (config Table 3), selective recompute + SP", hidden=12288, layers=96, heads=96, tp=8,
        pp=8, microbatch=1, global_batch=64, recompute="selective", sequence_parallel=True, published=13.75,
        stored=14.21268020410302, note=_INTERLEAVED, **_K),
    Row("K4", table="Table 5 (config Table 3), full recompute", hidden=12288, layers=96, heads=96, tp=8, pp=8,
        microbatch=1, global_batch=64, recompute="full", sequence_parallel=False, published=18.13,
        stored=18.64926049281852, note=_INTERLEAVED, **_K),
    Row("K5", table="Table 5 (config Table 3), selective recompute + SP", hidden=20480, layers=105, heads=128, tp=8,
        pp=35, microbatch=1, global_batch=280, recompute="selective", sequence_parallel=True, published=37.83,
        stored=41.019544271801955, note=_INTERLEAVED, **_K),
    Row("K6", table="Table 5 (config Table 3), full recompute", hidden=20480, layers=105, heads=128, tp=8, pp=35,
        microbatch=1, global_batch=280, recompute="full", sequence_parallel=False, published=49.05,
        stored=53.65788746457747, note=_INTERLEAVED, **_K),
    Row("K7", table="Table 5 (config Table 3), selective recompute + SP", hidden=25600, layers=128, heads=160, tp=8,
        pp=64, microbatch=1, global_batch=512, recompute="selective", sequence_parallel=True, published=71.49,
        stored=77.0530839527594, **_K),
    Row("K8", table="Table 5 (config Table 3), full recompute", hidden=25600, layers=128, heads=160, tp=8, pp=64,
        microbatch=1, global_batch=512, recompute="full", sequence_parallel=False, published=94.42,
        stored=100.61272788668836, **_K),
    Row("N1", table="Table 1 (1.7B)", hidden=2304, layers=24, heads=24, tp=1, pp=1, dp=32, global_batch=512,
        published=137.0, stored=158.54213684677012, note=_MB, **_N),
    Row("N2", table="Table 1 (3.6B)", hidden=3072, layers=30, heads=32, tp=2, pp=1, dp=32, global_batch=512,
        published=138.0, stored=152.18265733859675, note=_MB, **_N),
    Row("N3", table="Table 1 (7.5B)", hidden=4096, layers=36, heads=32, tp=4, pp=1, dp=32, global_batch=512,
        published=142.0, stored=145.04109441845029, note=_MB, **_N),
    Row("N4", table="Table 1 (18.4B)", hidden=6144, layers=40, heads=48, tp=8, pp=1, dp=32, global_batch=1024,
        published=135.0, stored=136.75729792829523, note=_MB, **_N),
    Row("N5", table="Table 1 (39.1B)", hidden=8192, layers=48, heads=64, tp=8, pp=2, dp=32, global_batch=1536,
        published=138.0, stored=148.49020713923443, note=_MB, **_N),
    # run since the simulator merges identical replicas and ranks (sim.symmetry)
    Row("N6", table="Table 1 (76.1B)", hidden=10240, layers=60, heads=80, tp=8, pp=4, dp=32, global_batch=1792,
        published=140.0, stored=151.96973415697565, note=_MB, **_N),
    Row("N7", table="Table 2 (PTD-P, 174.6B, 384 GPUs)", hidden=12288, layers=96, heads=96, tp=8, pp=12, dp=4,
        global_batch=1536, published=153.0, stored=167.2476571901137, **_N),
    Row("N8", table="Table 2 (PTD-P, 174.6B, 768 GPUs)", hidden=12288, layers=96, heads=96, tp=8, pp=12, dp=8,
        global_batch=1536, published=149.0, stored=161.43059725283956, **_N),
    # H100 rows: Megatron-Bridge's published DGX-H100 pre-training tables (fp8 current scaling;
    # the table's tokens/s/GPU is compared, its Model TFLOP/s is the same figure times
    # Megatron's model FLOPs per token)
    Row("H1", source=NEMO, url=NEMO_URL, table="25.11 DGX-H100 table, LLAMA3_8B (FP8-CS, FSDP 8)", model="llama3-8b",
        hidden=4096, layers=32, heads=32, tp=1, pp=1, dp=8, zero=3, microbatch=1, global_batch=128,
        recompute="none", sequence_parallel=False, precision="fp8", attention="flash", seq_len=8192,
        vocab=128256, kind="h100", metric="tokens_per_gpu_s", published=14451.0,
        stored=16686.311616845083, note=_NEMO_NOTE),
    Row("H2", source=NEMO, url=NEMO_URL, table="25.11 DGX-H100 table, LLAMA3_70B (FP8-CS, GBS 128)", model="llama3-70b",
        hidden=8192, layers=80, heads=64, tp=4, pp=8, vp=5, dp=2, zero=1, microbatch=1, global_batch=128,
        recompute="none", sequence_parallel=True, precision="fp8", attention="flash", seq_len=8192,
        vocab=128256, kind="h100", metric="tokens_per_gpu_s", published=1602.0,
        stored=1685.5615964018707, tp_comm_overlap=True, note=_NEMO_NOTE),
    Row("H3", source=NEMO_2602, url=NEMO_URL, table="26.02 LLAMA3_70B table, DGX-H100 (FP8, GBS 256)",
        model="llama3-70b", hidden=8192, layers=80, heads=64, tp=4, pp=8, vp=5, dp=2, zero=1, microbatch=1,
        global_batch=256, recompute="none", sequence_parallel=True, precision="fp8", attention="flash",
        seq_len=8192, vocab=128256, kind="h100", metric="tokens_per_gpu_s", published=1621.0,
        stored=1712.3461625134842, tp_comm_overlap=True, note=_NEMO_NOTE),
    Row("H4", source=NEMO, url=NEMO_URL, table="25.11 DGX-H100 table, LLAMA3.1_405B (FP8-CS, GBS 512)",
        model="llama3-405b", hidden=16384, layers=126, heads=128, tp=8, pp=8, vp=8, cp=2, dp=8, zero=1,
        microbatch=1, global_batch=512, recompute="none", sequence_parallel=True, precision="fp8",
        attention="flash", seq_len=8192, vocab=128256, kind="h100", metric="tokens_per_gpu_s", published=292.0,
        stored=342.4613442447238, tp_comm_overlap=True, note=_NEMO_NOTE),
    # MoE rows: Qwen3-30B-A3B with expert parallelism 8, the one DGX-H100 MoE configuration of
    # a zoo model with every field given, published twice: dropless with forced-balanced
    # routing (25.11) and with token drop at capacity factor 1, padded (25.09); both are
    # capacity factor 1 here, the simulated figure is the same
    Row("M1", source=NEMO, url=NEMO_URL, table="25.11 DGX-H100 table, Qwen3_30B_a3B (FP8-CS, EP 8, dropless)",
        stored=15951.660584746583, note=_MOE_NOTE + "; dropless: routing forced balanced", published=5275.0, **_QWEN3),
    Row("M2", source=NEMO_2509, url=NEMO_URL, table="25.09 DGX-H100 table, Qwen3_30B_a3B (tokendrop, EP 8)",
        stored=15951.660584746583, note=_MOE_NOTE + _TOKENDROP, published=10494.0, **_QWEN3),
    # the same model in NeMo AutoModel (PyTorch FSDP2 + DeepEP, one node), and DeepSeek-V3 over 32 nodes:
    # expert parallelism inside a node and across the fabric
    Row("M3", source=AUTOMODEL, url=AUTOMODEL_URL, table="Pre-Training, Qwen3 MoE 30B (8 GPUs, FSDP 8, EP 8)",
        model="qwen3-30b-a3b", hidden=2048, layers=48, heads=32, tp=1, pp=1, dp=8, ep=8, zero=3, microbatch=4,
        global_batch=512, recompute="full", sequence_parallel=False, precision="bf16", attention="flash",
        seq_len=4096, vocab=151936, kind="h100", metric="tokens_per_gpu_s", published=12040.0,
        stored=18217.108768667167,
        dispatcher="deepep", routing="contiguous",
        note=_AUTOMODEL_NOTE.format(recipe="qwen3_moe_30b_te_deepep.yaml")),
    Row("M4", source=AUTOMODEL, url=AUTOMODEL_URL, table="Pre-Training, DeepSeek V3 671B (256 GPUs, PP 4, VP 8, "
        "EP 64)", model="deepseek-v3", hidden=7168, layers=61, heads=128, tp=1, pp=4, vp=8, dp=64, ep=64, zero=2,
        microbatch=1, global_batch=512, recompute="full", sequence_parallel=False, precision="bf16",
        attention="flash", seq_len=4096, vocab=129280, kind="h100", metric="tokens_per_gpu_s", published=1002.0,
        stored=1254.6184832787335, dispatcher="deepep", routing="contiguous", note=_AUTOMODEL_NOTE.format(recipe="deepseek_v3_te_deepep.yaml") + "; reshard_after_forward "
        "false (the parameters stay gathered from a forward to its backward: ZeRO-2's traffic); 61 layers in "
        "pp 4 x vp 8 = 32 chunks (the recipe's layers_per_stage 2), split by the zoo's balanced rule; MLA "
        "simulated as standard attention of the same FLOPs (workloads.zoo)"),
    Row("M5", source=AUTOMODEL, url=AUTOMODEL_URL, table="Pre-Training, DeepSeek V3 671B (1024 GPUs, PP 4, VP 8, "
        "EP 64, GBS 8192)", model="deepseek-v3", hidden=7168, layers=61, heads=128, tp=1, pp=4, vp=8, dp=256, ep=64,
        zero=2, microbatch=1, global_batch=8192, recompute="full", sequence_parallel=False, precision="bf16",
        attention="flash", seq_len=4096, vocab=129280, kind="h100", metric="tokens_per_gpu_s", published=865.0,
        stored=1369.366662141036, dispatcher="deepep", routing="contiguous",
        note=_AUTOMODEL_NOTE.format(recipe="deepseek_v3_te_deepep_1024.yaml") + "; as M4, over 128 nodes, the "
        "table's local batch 8 accumulated 4 times (32 microbatches a pipeline a step); the recipe file at the "
        "version read states layers_per_stage 4 where the table states vp 8: the table's is run"),
)
BY_KEY = {r.key: r for r in ROWS}


@dataclass(frozen=True)
class Outcome:
    """A row simulated (``simulated``, ``error`` = simulated / published - 1) or skipped
    (``skipped`` says why). ``fits``: the simulated peak memory is within the device's."""

    key: str
    published: float
    simulated: float | None
    error: float | None
    wall_s: float
    iteration_s: float | None = None
    peak_memory_gib: float | None = None
    bound_memory_gib: float | None = None   # the checker's (costs.evaluate.plan_memory_bytes)
    fits: bool | None = None
    skipped: str = ""


class RowTimeout(Exception):
    """A row ran past its wall-time cap."""


def _alarm(signum, frame):   # noqa: ARG001 (signal handler signature)
    raise RowTimeout


def simulate_row(row: Row, cap_s: float | None = None, vp: int | None = None) -> Outcome:
    """Simulate ``row`` through ``whatif`` with its memory check on (the published run
    fits, by the checker's bound; off only where ``Row.check_memory`` says so) and compare
    it with the published figure. ``cap_s`` bounds the wall time (SIGALRM; main thread
    only). ``vp`` overrides the row's own chunks per stage (a sensitivity run, not the table)."""
    t0 = time.perf_counter()
    use_alarm = bool(cap_s) and hasattr(signal, "setitimer")
    if use_alarm:
        old = signal.signal(signal.SIGALRM, _alarm)
        # repeating: an alarm that lands in a finalizer (a garbage-collected earlier row) is
        # swallowed there ("Exception ignored in ..."), and a one-shot timer never fires again
        signal.setitimer(signal.ITIMER_REAL, cap_s, max(cap_s, ALARM_REPEAT_S))
    try:
        w = whatif(row.workload, row.topology, dp=row.dp, tp=row.tp, pp=row.pp, microbatch_size=row.microbatch,
                   global_batch=row.global_batch, precision=row.precision, seq_len=row.seq_len,
                   recompute=row.recompute, sequence_parallel=row.sequence_parallel,
                   check_memory=row.check_memory, breakdown=False, vp=row.vp if vp is None else vp, cp=row.cp,
                   zero=row.zero, attention=row.attention, ep=row.ep, tp_comm_overlap=row.tp_comm_overlap,
                   dispatcher=row.dispatcher, routing=row.routing)
    except RowTimeout:
        signal.setitimer(signal.ITIMER_REAL, 0)   # no second alarm while the outcome is built
        return Outcome(row.key, row.published, None, None, time.perf_counter() - t0,
                       skipped=f"over the {cap_s:.0f} s wall-time cap")
    except DistplanError as e:
        return Outcome(row.key, row.published, None, None, time.perf_counter() - t0, skipped=str(e))
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    it = w.iteration_s
    sim = it if row.metric == "iteration_s" else \
        row.global_batch * row.seq_len / (row.gpus * it) if row.metric == "tokens_per_gpu_s" else \
        paper_flops(row) / (row.gpus * it) / 1e12
    cap = float(w.problem.device_mem_bytes.min())
    return Outcome(row.key, row.published, sim, sim / row.published - 1, time.perf_counter() - t0, it,
                   w.peak_memory_bytes / 2**30, w.bound_memory_bytes / 2**30, w.peak_memory_bytes <= cap)


def summary(outcomes: list[Outcome]) -> tuple[float, float]:
    """(mean absolute error, worst absolute error) over the rows that ran (NaN if none)."""
    errs = [abs(o.error) for o in outcomes if o.error is not None]
    if not errs:
        return math.nan, math.nan
    return math.fsum(errs) / len(errs), max(errs)


UNITS = {"iteration_s": "s/iter", "paper_tflops": "TFLOP/s/GPU", "tokens_per_gpu_s": "tokens/s/GPU"}


def _fmt(x: float | None, metric: str) -> str:
    if x is None:
        return "-"
    if metric == "tokens_per_gpu_s":
        return f"{x:,.0f} tok/s"
    return f"{x:.2f} s" if metric == "iteration_s" else f"{x:.1f} TF/s"


def _mem(o: Outcome) -> str:
    if o.peak_memory_gib is None or o.bound_memory_gib is None:
        return "-"
    return f"{o.peak_memory_gib:.1f} / {o.bound_memory_gib:.1f} ({o.bound_memory_gib / o.peak_memory_gib - 1:+.1%})"


def markdown(outcomes: list[Outcome]) -> str:
    """The page's table: source, configuration, published, simulated, error; then the
    MAE lines (by device kind; dense and MoE rows apart), and a memory line when every
    row carries its memory figures (a run does, ``Row.stored`` alone does not)."""
    lines = ["| row | source | configuration | published | simulated | error |", "|---|---|---|---|---|---|"]
    for o in outcomes:
        r = BY_KEY[o.key]
        src = f"[{r.source.split(',')[0]}]({r.url}) {r.table}"
        err = f"{o.error:+.1%}" if o.error is not None else f"not run: {o.skipped.split(';')[0]}"
        lines.append(f"| {r.key} | {src} | {r.workload}: {r.describe()} | {_fmt(r.published, r.metric)} | "
                     f"{_fmt(o.simulated, r.metric)} | {err} |")
    mae, worst = summary(outcomes)
    lines.append("")
    lines.append(f"Mean absolute error {mae:.1%}, worst {worst:.1%} over "
                 f"{sum(o.error is not None for o in outcomes)} rows.")
    kinds = sorted({BY_KEY[o.key].kind for o in outcomes})
    if len(kinds) > 1:   # one summary per device kind (the papers' A100 rows, the H100 tables' rows)
        parts = []
        for k in kinds:
            group = [o for o in outcomes if BY_KEY[o.key].kind == k]
            gm, gw = summary(group)
            parts.append(f"{k.upper()} rows: {gm:.1%}, worst {gw:.1%} over {sum(o.error is not None for o in group)}")
        lines.append("By device: " + "; ".join(parts) + ".")
    moe = [o for o in outcomes if BY_KEY[o.key].ep > 1]
    if moe and len(moe) < len(outcomes):   # the expert-parallel rows apart from the dense ones
        dense = [o for o in outcomes if BY_KEY[o.key].ep == 1]
        (dm, dw), (mm, mw) = summary(dense), summary(moe)
        lines.append(f"Dense rows: {dm:.1%}, worst {dw:.1%} over {sum(o.error is not None for o in dense)}; "
                     f"MoE rows (expert parallel): {mm:.1%}, worst {mw:.1%} over "
                     f"{sum(o.error is not None for o in moe)}.")
    if outcomes and all(o.peak_memory_gib is not None and o.bound_memory_gib is not None for o in outcomes):
        peaks = [o.peak_memory_gib for o in outcomes]
        over = [o.bound_memory_gib / o.peak_memory_gib - 1 for o in outcomes]
        fit = "every row fits its GPUs" if all(o.fits for o in outcomes) else \
            f"{sum(not o.fits for o in outcomes)} rows do not fit their GPUs"
        lines.append(f"Simulated peak memory {min(peaks):.1f}-{max(peaks):.1f} GiB per GPU ({fit}); the "
                     f"checker's bound lies {min(over):+.2%} to {max(over):+.2%} from it.")
    return "\n".join(lines)


def read_block(path: Path) -> str:
    """The generated block of the page at ``path`` (between ``BEGIN`` and ``END``)."""
    text = Path(path).read_text(encoding="utf-8")
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        raise DistplanError(f"{path}: no fidelity table block; put the lines {BEGIN!r} and {END!r} "
                            f"where the table goes")
    return text[i + len(BEGIN):j].strip("\n")


def write_block(path: Path, block: str) -> bool:
    """Replace the generated block of the page at ``path`` by ``block``; True if it changed."""
    old = read_block(path)
    if old == block:
        return False
    text = Path(path).read_text(encoding="utf-8")
    i, j = text.find(BEGIN) + len(BEGIN), text.find(END)
    Path(path).write_text(text[:i] + "\n\n" + block + "\n\n" + text[j:], encoding="utf-8")
    return True


def moved(outcomes: list[Outcome]) -> list[str]:
    """Rows whose simulated figure moved from ``Row.stored`` (beyond ``DRIFT_REL``), each as
    the ``stored=`` value to paste into ``ROWS``."""
    out = []
    for o in outcomes:
        r = BY_KEY[o.key]
        if o.simulated is not None and (r.stored is None or abs(o.simulated / r.stored - 1) > DRIFT_REL):
            out.append(f"{r.key}: stored={o.simulated!r} (was {r.stored!r})")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m distplan.studies.fidelity", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default=",".join(r.key for r in ROWS), help="comma-separated row keys (default: all)")
    ap.add_argument("--cap-s", type=float, default=DEFAULT_CAP_S, help="wall-time cap per row, seconds (0: none)")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument("--markdown", nargs="?", const="-", default=None, metavar="PATH",
                    help="print the docs' table, or with PATH write it between PATH's fidelity-table marker "
                         "comments (every row, none skipped)")
    ap.add_argument("--vp", type=int, default=None,
                    help="simulate every row with this many chunks per stage (interleaved 1F1B where > 1 and the "
                         "row has pp >= 2; a sensitivity run: the rows state their own)")
    args = ap.parse_args(argv)
    keys = [k.strip() for k in args.rows.split(",") if k.strip()]
    unknown = [k for k in keys if k not in BY_KEY]
    if unknown:
        print(f"error: unknown row(s) {', '.join(unknown)}; rows are {', '.join(BY_KEY)}", file=sys.stderr)
        return 2
    if args.markdown not in (None, "-"):
        if keys != list(BY_KEY) or args.vp is not None:
            print("error: --markdown PATH writes the whole table: drop --rows and --vp", file=sys.stderr)
            return 2
        try:
            read_block(Path(args.markdown))
        except (DistplanError, OSError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    outcomes = []
    for i, k in enumerate(keys, 1):
        r = BY_KEY[k]
        print(f"[{i}/{len(keys)}] {k} {r.workload} on {r.topology} ...", file=sys.stderr, flush=True)
        o = simulate_row(r, args.cap_s or None, None if args.vp is None or r.pp < 2 else args.vp)
        outcomes.append(o)
        res = f"skipped ({o.skipped})" if o.error is None else \
            f"{_fmt(o.simulated, r.metric)} vs {_fmt(r.published, r.metric)} ({o.error:+.1%})"
        print(f"      {res}, {o.wall_s:.1f} s wall", file=sys.stderr, flush=True)
    mae, worst = summary(outcomes)
    if args.markdown not in (None, "-"):
        skipped = [o.key for o in outcomes if o.error is None]
        if skipped:
            print(f"error: {', '.join(skipped)} not run; {args.markdown} keeps its table", file=sys.stderr)
            return 1
        changed = write_block(Path(args.markdown), markdown(outcomes))
        print(f"{'wrote' if changed else 'unchanged:'} {args.markdown} (MAE {mae:.1%}, worst {worst:.1%})",
              file=sys.stderr)
        for line in moved(outcomes):
            print(f"  fidelity.ROWS moved: {line}", file=sys.stderr)
    if args.json:
        print(json.dumps({"rows": [asdict(BY_KEY[o.key]) | asdict(o) for o in outcomes],
                          "mae": mae, "worst": worst}, indent=1))
    elif args.markdown == "-":
        print(markdown(outcomes))
    elif args.markdown is None:
        print(f"{'row':4} {'source':34} {'configuration':88} {'published':>13} {'simulated':>13} {'error':>7} "
              f"{'memory: sim / checker GiB':>26} {'wall':>7}")
        for o in outcomes:
            r = BY_KEY[o.key]
            err = f"{o.error:+.1%}" if o.error is not None else "skip"
            print(f"{r.key:4} {r.source.split(',')[0] + ' ' + r.table.split(' (')[0]:34} "
                  f"{r.workload + ': ' + r.describe():88} {_fmt(r.published, r.metric):>13} "
                  f"{_fmt(o.simulated, r.metric):>13} {err:>7} {_mem(o):>26} {o.wall_s:6.1f}s")
            if o.skipped:
                print(f"     not run: {o.skipped}")
        print(f"MAE {mae:.1%}, worst {worst:.1%} over {sum(o.error is not None for o in outcomes)} of "
              f"{len(outcomes)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
