"""The Problem: every number the MILP and the simulator read, built once from a Graph
and a Topology. Indices: operators v (topological order), precisions q (the allowed
set, highest fidelity first), device kinds c, devices d, links l, tensors e.

Times are per microbatch. ``inf`` marks a precision a device kind cannot run, or one the
low-bit policy (``ProblemOptions.low_bit_ops``) does not let an operator use.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from distplan.costs.compute import op_time_s
from distplan.costs.fp8 import fp8_cast_bwd_s, fp8_cast_fwd_s, is_fp8_linear
from distplan.costs.memory import activation_bytes, dropout_extra_bytes, graph_send_elems, static_bytes
from distplan.costs.sensitivity import sensitivities
from distplan.core.deadline import check_time, graph_size
from distplan.core.errors import DistplanError
from distplan.core.precision import PRECISION_NAMES, parse_precisions, precision
from distplan.core.schedules import INFERENCE_SCHEDULES, SCHEDULES, TRAINING_SCHEDULES, default_schedule
from distplan.core.validate import check_choice, check_int
from distplan.topologies.topology import Topology
from distplan.workloads.graph import Graph


#: the most microbatches a problem may have (every plan is simulated microbatch by microbatch)
MAX_MICROBATCHES = 100_000

#: operator kinds that are matrix products (GEMM-class kernels)
MATMUL_KINDS = ("matmul", "attn_score", "attn_context", "head", "conv")
#: what the "matmul" policy lets compute below 16 bits: the matrix products, and embedding
#: tables (weight-only int8: rows gathered from an int8 table and dequantised on the way
#: out, as TensorRT-LLM stores them; a tied LM head shares that table)
LOW_BIT_KINDS = MATMUL_KINDS + ("embedding",)
#: which operators may compute in a format narrower than 16 bits (int8, fp8), and how casts
#: run. "matmul": the int8-engine model (TensorRT, SmoothQuant W8A8 kernels, Transformer
#: Engine): only matrix products compute in low bit (norms, softmax, activations, residual
#: adds stay in 16 bits), and a cast into or out of a matrix product is fused into it or
#: its neighbour (quantize in the producer's epilogue, dequantize in the product's): no
#: kernel of its own, no extra memory round trip. "all": any operator may compute in low
#: bit, and every cast is a kernel of its own (launch + read + write).
LOW_BIT_OPS = ("matmul", "all")
#: how a stage-crossing transfer is charged: "overlapped" (the default) puts its bytes on
#: links only, overlapped with compute; "exposed" also adds its time to the device loads
#: of the sending and of the receiving stage, once per source op and receiving stage, sent
#: directly (costs.exposed)
COMM_MODES = ("overlapped", "exposed")


def low_bit(prec: str) -> bool:
    """A format narrower than 16 bits (int8, fp8)."""
    return precision(prec).bytes_per_elem < 2


def op_allows(kind: str, prec: str, low_bit_ops: str) -> bool:
    """May an operator of ``kind`` compute at ``prec`` under the ``low_bit_ops`` policy?"""
    return low_bit_ops == "all" or not low_bit(prec) or kind in LOW_BIT_KINDS


@dataclass(frozen=True)
class ProblemOptions:
    """What the user asks for: precisions allowed, microbatches, pipeline schedule,
    which operators may use the formats under 16 bits (``LOW_BIT_OPS``), and whether
    transfers add to device loads (``comm``, one of ``COMM_MODES``).

    ``schedule`` defaults to 'stream' for inference and '1f1b' for training.
    """

    precisions: tuple[str, ...] = ("fp16", "int8")
    microbatches: int = 16
    schedule: str | None = None
    low_bit_ops: str = "matmul"
    comm: str = "overlapped"

    def __post_init__(self) -> None:
        """Each field of its type (core.validate; one DistplanError naming it): a count is
        a positive int (2.5, "16" and True were taken, and 2.5 failed in the simulator)."""
        name = "ProblemOptions."
        p = self.precisions
        if not (isinstance(p, str) or (isinstance(p, (list, tuple)) and all(isinstance(x, str) for x in p))):
            raise DistplanError(f"{name}precisions must be a string such as 'fp16,int8' or a list of precision "
                                f"names, got {p!r} ({type(p).__name__})"[:300])
        object.__setattr__(self, "microbatches", check_int(name + "microbatches", self.microbatches))
        check_choice(name + "schedule", self.schedule, SCHEDULES, optional=True)
        check_choice(name + "low_bit_ops", self.low_bit_ops, LOW_BIT_OPS)
        check_choice(name + "comm", self.comm, COMM_MODES)


@dataclass(frozen=True, eq=False)
class Problem:
    graph: Graph
    topology: Topology
    precisions: tuple[str, ...]
    microbatches: int
    schedule: str
    kind_names: tuple[str, ...]
    device_kind: np.ndarray       # (D,) kind index of each device
    fwd_time_s: np.ndarray        # (V, Q, C)
    bwd_time_s: np.ndarray        # (V, Q, C) zeros in inference
    supported: np.ndarray         # (Q, C) bool
    static_bytes: np.ndarray      # (V, Q)
    act_bytes: np.ndarray         # (V, Q) per microbatch: the output, in training with dropout's extras
    send_bytes: np.ndarray        # (V, Q) per microbatch, the part of act_bytes other ops read
    tied_owner: np.ndarray        # (V,) op whose parameters v also reads (Operator.tied_to), -1: none
    tied_bytes: np.ndarray        # (V, Q) static bytes of those parameters on v's devices when apart
    sensitivity: np.ndarray       # (V, Q)
    op_allowed: np.ndarray        # (V, Q) bool: the low-bit policy lets op v compute at q
    cast_fused: np.ndarray        # (E,) bool: a cast of tensor e is fused into a matrix product
    edges: np.ndarray             # (E, 2) int (u, v)
    edge_elems: np.ndarray        # (E,)
    bytes_per_elem: np.ndarray    # (Q,)
    cast_s_per_elem: np.ndarray   # (Q, Q, C), zero on the diagonal
    cast_fixed_s: np.ndarray      # (C,) per cast task
    device_mem_bytes: np.ndarray  # (D,)
    link_bw_bytes_per_s: np.ndarray  # (L,)
    link_latency_s: np.ndarray    # (L,)
    low_bit_ops: str = "matmul"
    comm: str = "overlapped"
    _extra: dict = field(default_factory=dict, repr=False)

    @property
    def training(self) -> bool:
        return self.graph.mode == "training"

    @property
    def n_ops(self) -> int:
        return len(self.graph.ops)

    @property
    def n_devices(self) -> int:
        return self.topology.n_devices

    def q_index(self, prec: str) -> int:
        try:
            return self.precisions.index(prec)
        except ValueError:
            raise DistplanError(
                f"precision {prec!r} is not allowed in this problem; allowed: {', '.join(self.precisions)}"
            ) from None

    @property
    def options(self) -> ProblemOptions:
        """The options this problem was built with (rebuild a variant with
        ``dataclasses.replace(problem.options, microbatches=...)``)."""
        return ProblemOptions(precisions=self.precisions, microbatches=self.microbatches, schedule=self.schedule,
                              low_bit_ops=self.low_bit_ops, comm=self.comm)

    @property
    def exposed(self) -> bool:
        """Do transfers add to the device loads (``comm`` "exposed", costs.exposed)?"""
        return self.comm == "exposed"

    def fallback_q(self, v: int, q: int, c: int | None = None) -> int | None:
        """``q`` if op ``v`` may compute at it, else the nearest higher-fidelity precision
        it may use (int8 on a softmax: fp16), else the nearest lower one. With a kind
        ``c``: only precisions c runs, and None when there is none."""
        def ok(p: int) -> bool:
            return bool(self.op_allowed[v, p]) and (c is None or bool(self.supported[p, c]))

        if ok(q):
            return q
        up = [p for p in range(q - 1, -1, -1) if ok(p)]
        down = [p for p in range(q + 1, len(self.precisions)) if ok(p)]
        return (up or down or [None])[0]

    def effective_precisions(self, op_precision) -> tuple[str, ...]:
        """A per-op precision list with every precision an op may not use replaced by its
        ``fallback_q`` (a uniform "int8" becomes int8 matrix products, fp16 elsewhere)."""
        return tuple(self.precisions[self.fallback_q(v, self.q_index(p))] for v, p in enumerate(op_precision))

    def op_time_s(self, v: int, q: int, c: int) -> float:
        """Compute seconds per microbatch of op v at precision q on kind c (fwd + bwd in training)."""
        return float(self.fwd_time_s[v, q, c] + self.bwd_time_s[v, q, c])

    def cast_time_s(self, e: int, q_from: int, q_to: int, c: int) -> float:
        """Seconds to cast tensor e from q_from to q_to on kind c (doubled in training: the
        gradient is cast back); zero when the cast is fused into a matrix product
        (``cast_fused``, the "matmul" low-bit policy)."""
        if q_from == q_to or self.cast_fused[e]:
            return 0.0
        t = self.edge_elems[e] * self.cast_s_per_elem[q_from, q_to, c] + self.cast_fixed_s[c]
        return float(2 * t if self.training else t)

    def in_edge_ids(self, v: int) -> list[int]:
        """Indices of the edges into op ``v`` (cached per problem)."""
        cache = self.__dict__.get("_in_edges")
        if cache is None:
            cache = [[] for _ in range(self.n_ops)]
            for e, (_, w) in enumerate(self.edges.tolist()):
                cache[w].append(e)
            object.__setattr__(self, "_in_edges", cache)
        return cache[v]

    def out_bytes(self, v: int, q: int) -> float:
        """Bytes of op v's output at precision index q (what it holds)."""
        return float(self.graph.ops[v].out_elems) * float(self.bytes_per_elem[q])

    def wire_q(self, q: int) -> int:
        """The precision index an op computed at ``q`` sends its output at: Transformer
        Engine's fp8 training recipe (the "matmul" low-bit policy) quantizes inside its
        GEMMs and writes bf16 outputs, so an fp8 op's tensor-parallel all-reduce and
        all-to-alls move bf16 (when the problem has it); ``q`` otherwise."""
        if (self.training and self.low_bit_ops == "matmul" and self.precisions[q] == "fp8"
                and "bf16" in self.precisions):
            return self.q_index("bf16")
        return q

    def collective_bytes(self, v: int, q: int) -> float:
        """Bytes of op v's output (computed at ``q``) that a collective moves (``wire_q``)."""
        return self.out_bytes(v, self.wire_q(q))

    def sending_edges(self) -> np.ndarray:
        """(E', 2) the tensors (u, v) that carry bytes: the ones that make u hold its sent
        bytes for a later stage (costs.memory.activation_factors)."""
        return self.edges[self.edge_elems > 0]

    def period_lower_bound_s(self) -> float:
        """Total fastest compute divided by the device count: no plan's period is shorter."""
        t = self.fwd_time_s + self.bwd_time_s
        best = np.min(t.reshape(self.n_ops, -1), axis=1)
        return float(math.fsum(best) / self.n_devices)


#: long loops look at the run's deadline (core.deadline) every this many steps
CLOCK_EVERY = 4096


def _depth_counts(graph: Graph) -> tuple[list[int], list[int]]:
    """Number of ancestors and descendants of every op (exact; ``_reach_counts``)."""
    n = len(graph.ops)
    preds, succs = graph.preds(), graph.succs()
    size = graph_size(n, len(graph.tensors))
    before = _reach_counts(range(n), preds, succs, size)
    after = _reach_counts(range(n - 1, -1, -1), succs, preds, size)
    return before, after


def _reach_counts(order: range, ins: list[list[int]], outs: list[list[int]], size: str) -> list[int]:
    """For every op, how many ops reach it along ``ins`` (visited in ``order``, a
    topological order of ``ins``). An op with one in-neighbour u is reached by u and
    what reaches u: count(u) + 1, no set needed. Only where an op has several
    in-neighbours do their sets overlap: those ops, and everything upstream of them, keep
    a bitset (a Python int) of what reaches them, dropped once its last reader is done.
    A 100,000-op chain needs no bitset at all (it took 6 s and 1.2 GB as bitsets)."""
    n = len(ins)
    need = [False] * n   # some op downstream unions this op's set
    for v in reversed(order):
        need[v] = any(len(ins[w]) > 1 or need[w] for w in outs[v])
    count = [0] * n
    bits: dict[int, int] = {}
    readers = [len(outs[v]) for v in range(n)]
    for i, v in enumerate(order):
        if i % CLOCK_EVERY == 0:
            check_time("counting every operator's ancestors and descendants", size)
        preds = ins[v]
        if len(preds) == 1:
            count[v] = count[preds[0]] + 1
            if need[v]:
                bits[v] = bits[preds[0]] | (1 << v)
        elif preds:
            acc = 0
            for u in preds:
                acc |= bits[u]
            count[v] = acc.bit_count()
            if need[v]:
                bits[v] = acc | (1 << v)
        elif need[v]:
            bits[v] = 1 << v
        for u in preds:
            readers[u] -= 1
            if readers[u] == 0:
                bits.pop(u, None)
    return count


def _roofline_times(graph: Graph, kinds: list, precs: tuple[str, ...], allowed: np.ndarray, training: bool,
                    fwd: np.ndarray, bwd: np.ndarray, fused_casts: bool = True) -> None:
    """``fwd``/``bwd`` [v, q, c] filled with every op's roofline seconds (``costs.compute.
    op_time_s``, the same operations in the same order, so the same numbers), inf where
    the op may not use the precision or the kind does not run it; measured times are
    written over them by the caller. Vectorised: a 100,000-op graph made 400,000 calls.
    Training at fp8 under the "matmul" policy (``fused_casts``: no cast kernels on the
    edges): a linear op's fp8 time carries Transformer Engine's scaling kernels
    (``costs.fp8``: its input quantized in the forward, its output gradient in the backward)."""
    flops_f = np.array([op.fwd_flops for op in graph.ops], dtype=float)
    flops_b = np.array([op.bwd_flops for op in graph.ops], dtype=float)
    touched = np.array([op.touched_elems for op in graph.ops], dtype=float)
    for q, p in enumerate(precs):
        b = precision(p).bytes_per_elem
        for c, k in enumerate(kinds):
            peak = k.peak_flops_per_s.get(p)
            if peak is None:
                fwd[:, q, c] = math.inf
                if training:
                    bwd[:, q, c] = math.inf
                continue
            rate = peak * k.efficiency_at(p)
            fwd[:, q, c] = np.where(allowed[:, q], np.maximum(flops_f / rate, touched * b / k.mem_bw_bytes_per_s)
                                    + k.launch_overhead_s, math.inf)
            if training:
                bwd[:, q, c] = np.where(allowed[:, q], np.maximum(flops_b / rate, 2 * touched * b
                                                                  / k.mem_bw_bytes_per_s) + k.launch_overhead_s,
                                        math.inf)
            if training and p == "fp8" and fused_casts:   # the recipe's per-tensor scaling (costs.fp8)
                for v, op in enumerate(graph.ops):
                    if allowed[v, q] and is_fp8_linear(op):
                        fwd[v, q, c] += fp8_cast_fwd_s(op, k.mem_bw_bytes_per_s, k.launch_overhead_s)
                        bwd[v, q, c] += fp8_cast_bwd_s(op, k.mem_bw_bytes_per_s, k.launch_overhead_s)


def _time_s(op, phase: str, kind_name: str, kind, prec: str) -> float:
    """Seconds of op's ``phase`` ('fwd'/'bwd') at ``prec`` on ``kind``: the measured time
    (``Operator.measured_s``: a profile's entry, or the op's own fwd_s/bwd_s) where the
    kind runs the precision, else the roofline (inf where it does not)."""
    if op.measured and kind.supports(prec):
        t = op.measured_s(kind_name, prec, phase)
        if t is not None:
            return float(t)
    if phase == "fwd":
        return op_time_s(op.fwd_flops, op.touched_elems, kind, prec)
    return op_time_s(op.bwd_flops, 2 * op.touched_elems, kind, prec)


def _check_measured(op, kind_names, kinds, precs) -> None:
    """A time measured for a kind at a precision the problem allows but the kind does not
    run is a mistake (the wrong kind, or the wrong topology): say so."""
    for kind, prec, *_ in op.times:
        if kind in kind_names and prec in precs:
            k = kinds[kind_names.index(kind)]
            if not k.supports(prec):
                raise DistplanError(f"op {op.name!r}: a time is given for kind {kind!r} at {prec}, which that kind "
                                    f"does not run (it runs {', '.join(sorted(k.peak_flops_per_s))}); drop the "
                                    "entry or fix the kind")


def build_problem(graph: Graph, topology: Topology, options: ProblemOptions | None = None) -> Problem:
    """Compute every cost number for ``graph`` on ``topology`` under ``options``."""
    options = options or ProblemOptions()
    precs = parse_precisions(options.precisions)
    if options.microbatches < 1:
        raise DistplanError(f"microbatches must be >= 1, got {options.microbatches}")
    if options.microbatches > MAX_MICROBATCHES:
        raise DistplanError(f"microbatches {options.microbatches} is more than distplan simulates "
                            f"({MAX_MICROBATCHES:,} at most); a step of that many microbatches is not a real run")
    if options.low_bit_ops not in LOW_BIT_OPS:
        raise DistplanError(f"low_bit_ops must be one of {', '.join(LOW_BIT_OPS)}, got {options.low_bit_ops!r}")
    if options.comm not in COMM_MODES:
        raise DistplanError(f"comm must be one of {', '.join(COMM_MODES)}, got {options.comm!r}")
    training = graph.mode == "training"
    if training and graph.bwd_flops == 0 and graph.fwd_flops > 0:
        raise DistplanError(f"graph {graph.name!r} has no backward FLOPs (every bwd_flops is 0), so training would "
                            "cost nothing for the backward pass; give bwd_flops per operator (about 2x fwd_flops "
                            "for matrix products) or plan it for inference")
    schedule = options.schedule or default_schedule(training)
    if schedule not in SCHEDULES:
        raise DistplanError(f"unknown schedule {schedule!r}; use one of {', '.join(SCHEDULES)}")
    if not training and schedule not in INFERENCE_SCHEDULES:
        raise DistplanError(f"schedule {schedule!r} needs a training graph; inference uses "
                            f"{' or '.join(map(repr, INFERENCE_SCHEDULES))}")
    if training and schedule not in TRAINING_SCHEDULES:
        raise DistplanError(f"training graphs need schedule {' or '.join(map(repr, TRAINING_SCHEDULES))}, "
                            f"not {schedule!r}")
    kind_names = tuple(sorted({d.kind for d in topology.devices}))
    kinds = [topology.kinds[k] for k in kind_names]
    supported = np.array([[k.supports(p) for k in kinds] for p in precs], dtype=bool)
    if not supported.any():
        raise DistplanError(
            f"no device in topology {topology.name!r} supports any of {', '.join(precs)}; "
            f"supported there: {sorted({p for k in kinds for p in k.peak_flops_per_s})}"
        )
    V, Q, C = len(graph.ops), len(precs), len(kinds)
    by_kind: dict[str, list[bool]] = {}
    for op in graph.ops:
        if op.kind not in by_kind:
            by_kind[op.kind] = [op_allows(op.kind, p, options.low_bit_ops) for p in precs]
    allowed = np.array([by_kind[op.kind] for op in graph.ops], dtype=bool).reshape(V, Q)
    refused = np.flatnonzero(~allowed.any(axis=1))
    if len(refused):
        op = graph.ops[int(refused[0])]
        raise DistplanError(
            f"op {op.name!r} ({op.kind}) may not compute at {', '.join(precs)}: formats under 16 bits are "
            f"for matrix products only (low_bit_ops 'matmul'); add a 16-bit precision (e.g. fp16) or allow "
            "them on every op (--low-bit-ops all)")
    fwd = np.empty((V, Q, C))
    bwd = np.zeros((V, Q, C))
    stat = np.empty((V, Q))
    act = np.empty((V, Q))
    sens = np.empty((V, Q))
    before, after = _depth_counts(graph)
    size = graph_size(V, len(graph.tensors))
    _roofline_times(graph, kinds, precs, allowed, training, fwd, bwd, options.low_bit_ops == "matmul")
    op_kinds = [op.kind for op in graph.ops]
    for q, p in enumerate(precs):
        sens[:, q] = sensitivities(op_kinds, p, precs[0], before, after, training)
    stat_of: dict[tuple[int, int], float] = {}   # same numbers, computed once per distinct value
    act_of: dict[tuple[int, int], float] = {}
    for v, op in enumerate(graph.ops):
        if v % CLOCK_EVERY == 0:
            check_time("costing every operator on every device kind and precision", size)
        if op.measured:
            _check_measured(op, kind_names, kinds, precs)
            for q, p in enumerate(precs):
                for c, k in enumerate(kinds):
                    fwd[v, q, c] = _time_s(op, "fwd", kind_names[c], k, p) if allowed[v, q] else math.inf
                    if training:
                        bwd[v, q, c] = _time_s(op, "bwd", kind_names[c], k, p) if allowed[v, q] else math.inf
        for q, p in enumerate(precs):
            key = (op.param_elems, q)
            x = stat_of.get(key)
            if x is None:
                x = stat_of[key] = static_bytes(op.param_elems, p, training)
            stat[v, q] = x
            if training and graph.dropout:
                act[v, q] = activation_bytes(op.out_elems, p) + dropout_extra_bytes(op, p)
            else:
                key = (op.out_elems, q)
                x = act_of.get(key)
                if x is None:
                    x = act_of[key] = activation_bytes(op.out_elems, p)
                act[v, q] = x

    edges = np.array([(u, v) for u, v, _ in graph.edges()], dtype=np.int64).reshape(-1, 2)
    elems = np.array([x for _, _, x in graph.edges()], dtype=float)
    bpe = np.array([precision(p).bytes_per_elem for p in precs], dtype=float)
    send = np.array(graph_send_elems(graph))[:, None] * bpe[None, :]
    cast = np.zeros((Q, Q, C))
    for a in range(Q):
        for b in range(Q):
            if a != b:
                cast[a, b, :] = [(bpe[a] + bpe[b]) / k.mem_bw_bytes_per_s for k in kinds]
    arrays = dict(
        device_kind=np.array([kind_names.index(d.kind) for d in topology.devices], dtype=np.int64),
        fwd_time_s=fwd, bwd_time_s=bwd, supported=supported, static_bytes=stat, act_bytes=act,
        send_bytes=send,
        tied_owner=np.array([-1 if op.tied_to is None else graph.index(op.tied_to) for op in graph.ops],
                            dtype=np.int64),
        tied_bytes=np.array([[static_bytes(op.tied_elems, p, training) if op.tied_to is not None else 0.0
                              for p in precs] for op in graph.ops]).reshape(V, Q),
        sensitivity=sens, op_allowed=allowed,
        cast_fused=np.array([options.low_bit_ops == "matmul" and (graph.ops[u].kind in LOW_BIT_KINDS
                                                                 or graph.ops[v].kind in LOW_BIT_KINDS)
                             for u, v in edges.tolist()], dtype=bool),
        edges=edges, edge_elems=elems, bytes_per_elem=bpe, cast_s_per_elem=cast,
        cast_fixed_s=np.array([k.launch_overhead_s for k in kinds]),
        device_mem_bytes=np.array([topology.kind_of(d).mem_capacity_bytes for d in range(topology.n_devices)]),
        link_bw_bytes_per_s=np.array([l.bw_bytes_per_s for l in topology.links], dtype=float),
        link_latency_s=np.array([l.latency_s for l in topology.links], dtype=float),
    )
    for a in arrays.values():
        a.setflags(write=False)
    return Problem(graph=graph, topology=topology, precisions=precs, microbatches=options.microbatches,
                   schedule=schedule, kind_names=kind_names, low_bit_ops=options.low_bit_ops,
                   comm=options.comm, **arrays)


__all__ = ["Problem", "ProblemOptions", "build_problem", "SCHEDULES", "PRECISION_NAMES", "MATMUL_KINDS",
           "LOW_BIT_KINDS", "LOW_BIT_OPS", "COMM_MODES", "low_bit", "op_allows"]
