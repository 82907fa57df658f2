"""The computation graph: operators (nodes) and tensors (edges), validated on construction.

Element counts are stored; bytes follow from the precision an operator runs at.
``Graph.ops`` is always in a deterministic topological order (stable with respect to
the order given), so an operator's index is its position in that order.
"""
from __future__ import annotations

import dataclasses

import heapq
import math
import re
from dataclasses import dataclass, field

from distplan.core.deadline import check_time, graph_size
from distplan.core.errors import DistplanError
from distplan.core.precision import PRECISION_NAMES
from distplan.core.units import brief
from distplan.workloads.colocate import check_groups

#: Operator kinds the zoo and importers produce; anything else is allowed but costed as "other".
OP_KINDS = (
    "matmul", "attn_score", "attn_context", "softmax", "layernorm", "activation",
    "add", "embedding", "head", "elementwise", "conv", "reshape", "other",
)
MODES = ("inference", "training")
#: long loops look at the run's deadline (core.deadline) every this many steps
CLOCK_EVERY = 4096

#: Megatron-style tensor-parallel roles (Shoeybi et al. 2019). Over a stage's tensor-
#: parallel group of t devices:
#: - ``column``: column-parallel matmul (QKV, FFN-up): weight split by output columns,
#:   output stays sharded; backward all-reduces the input gradient;
#: - ``row``: row-parallel matmul (attention output projection, FFN-down): input
#:   sharded, output all-reduced in the forward;
#: - ``sharded``: work on a sharded tensor (attention heads, the FFN activation),
#:   divides by t, no communication;
#: - ``replicated``: norms, residual adds, dropout: every rank does the whole work;
#: - ``vocab_embedding``: vocabulary-parallel embedding, output all-reduced;
#: - ``vocab_head``: vocabulary-parallel LM head: output (logits) sharded, backward
#:   all-reduces the input gradient (the loss's small all-reduces are not timed).
#: None (no role): the op divides by t and all-reduces its output (forward) and its
#: input gradient (backward) when its kind is matmul or head.
TP_ROLES = ("column", "row", "sharded", "replicated", "vocab_embedding", "vocab_head")


@dataclass(frozen=True)
class Operator:
    """One operator, per microbatch: its work, parameters and tensors.

    Each field's meaning is in its docstring below; the graph JSON that holds them is in
    docs/guides/own-model.md.
    """

    name: str
    kind: str
    fwd_flops: float
    bwd_flops: float = 0.0
    param_elems: int = 0
    out_elems: int = 0
    touched_elems: float = 0.0
    """Elements read plus written by the forward pass (inputs, weights, outputs); times
    the precision's bytes it gives memory traffic."""
    send_elems: float | None = None
    """Elements of ``out_elems`` that other operators read; None derives it from the
    out-tensors (costs.memory.send_elems). A fused operator sets it to what its members
    send out of it, so its inner tensors are not held for later stages."""
    tied_to: str | None = None
    """The operator that owns parameters this one reads (a tied LM head reads the embedding
    table); counted in the owner's ``param_elems`` only, and held again on this
    operator's devices when the two sit on different stages."""
    tied_elems: int = 0
    """How many of ``tied_to``'s parameters this operator reads."""
    expert_param_elems: int = 0
    """Of ``param_elems``, those of routed experts split over an expert-parallel group
    (``Stage.expert_parallel``): their gradients are reduced, and ZeRO shards them, over
    the replicas that hold the same experts only (``costs.sharding.expert_data_groups``)."""
    tp_role: str | None = None
    """How the op splits over a tensor-parallel group (``TP_ROLES``; None: the generic
    rule)."""
    fwd_s: float | None = None
    """Measured seconds per microbatch of the forward on every device kind and precision
    (None: the roofline of costs.compute)."""
    bwd_s: float | None = None
    """As ``fwd_s``, for the backward."""
    times: tuple[tuple[str, str, float | None, float | None], ...] = ()
    """Measured seconds per device kind, as ``(kind, precision, fwd_s, bwd_s)`` rows
    (precision "" for every precision, a None time for "not measured"), from a
    ``distplan-profile`` (workloads/profile.py). A row for the kind and precision wins over
    the kind's "" row, which wins over ``fwd_s``/``bwd_s``, which win over the roofline."""

    def measured_s(self, kind: str, prec: str, phase: str) -> float | None:
        """The measured seconds of ``phase`` ('fwd' or 'bwd') on device kind ``kind`` at
        ``prec``, or None (the roofline applies): the (kind, prec) row, else the kind's
        every-precision row, else ``fwd_s``/``bwd_s``."""
        i = 2 if phase == "fwd" else 3
        for p in (prec, ""):
            for row in self.times:
                if row[0] == kind and row[1] == p and row[i] is not None:
                    return row[i]
        return self.fwd_s if phase == "fwd" else self.bwd_s

    @property
    def measured(self) -> bool:
        """Does the op carry any measured time?"""
        return self.fwd_s is not None or self.bwd_s is not None or bool(self.times)


@dataclass(frozen=True)
class Tensor:
    """A tensor flowing from operator ``src`` to operator ``dst`` (``elems`` per microbatch)."""

    src: str
    dst: str
    elems: int


@dataclass(frozen=True)
class Graph:
    """A validated DAG of operators; ``ops`` is re-ordered topologically on construction."""

    name: str
    ops: tuple[Operator, ...]
    tensors: tuple[Tensor, ...]
    mode: str = "inference"
    batch_size: int = 1
    seq_len: int | None = None
    #: what the importer warned about (unknown operators, estimated sizes), one line each
    import_warnings: tuple[str, ...] = field(default=(), repr=False, compare=False, hash=False)
    _index: dict[str, int] = field(default_factory=dict, repr=False, compare=False, hash=False)
    #: trained with dropout (hidden and attention, as GPT-3/BERT/Megatron): only memory
    #: changes, by the masks and dropped-out scores kept for the backward (costs.memory)
    dropout: bool = False
    #: groups of operator names that must share one stage (workloads.colocate; overlapping
    #: groups are merged, members and groups kept in topological order)
    colocate: tuple[tuple[str, ...], ...] = ()
    #: counts every tensor-parallel degree must divide (Megatron splits attention by heads:
    #: the query and the key/value heads); empty: not known (a graph file that states none)
    tp_divides: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", tuple(self.ops))
        object.__setattr__(self, "tensors", tuple(self.tensors))
        object.__setattr__(self, "import_warnings", tuple(str(w) for w in self.import_warnings))
        _validate(self)
        order = _topological_order(self.ops, self.tensors, self.name)
        object.__setattr__(self, "ops", tuple(self.ops[i] for i in order))
        object.__setattr__(self, "_index", {op.name: i for i, op in enumerate(self.ops)})
        if self.colocate:
            object.__setattr__(self, "colocate", check_groups(self.colocate, self._index, self.name))
        tpd = tuple(self.tp_divides)
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in tpd):
            raise DistplanError(f"graph {self.name!r}: tp_divides must be positive whole numbers (attention "
                                f"heads), got {brief(list(tpd))}")
        object.__setattr__(self, "tp_divides", tpd)

    def tp_fits(self, tp: int) -> bool:
        """May the graph be split over ``tp`` tensor-parallel ranks (``tp_divides``)?"""
        return all(n % tp == 0 for n in self.tp_divides)

    # --- lookups -------------------------------------------------------------
    def index(self, name: str) -> int:
        """Position of operator ``name`` in topological order."""
        try:
            return self._index[name]
        except KeyError:
            raise DistplanError(f"graph {self.name!r} has no operator {name!r}") from None

    def op(self, name: str) -> Operator:
        return self.ops[self.index(name)]

    def edges(self) -> list[tuple[int, int, int]]:
        """(src index, dst index, elems) per tensor, in the stored tensor order."""
        return [(self._index[t.src], self._index[t.dst], t.elems) for t in self.tensors]

    def preds(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.ops]
        for u, v, _ in self.edges():
            out[v].append(u)
        return out

    def succs(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.ops]
        for u, v, _ in self.edges():
            out[u].append(v)
        return out

    # --- totals ----------------------------------------------------------------
    @property
    def fwd_flops(self) -> float:
        return math.fsum(op.fwd_flops for op in self.ops)

    @property
    def bwd_flops(self) -> float:
        return math.fsum(op.bwd_flops for op in self.ops)

    @property
    def param_elems(self) -> int:
        return sum(op.param_elems for op in self.ops)

    @property
    def measured(self) -> bool:
        """Does any operator carry a measured time (``Operator.fwd_s``, ``times``)?"""
        return any(op.measured for op in self.ops)

    def with_mode(self, mode: str) -> "Graph":
        """The same graph run for ``mode`` ('inference' or 'training')."""
        return dataclasses.replace(self, mode=mode)   # every other field kept (dropout was lost)

    def with_batch_size(self, batch_size: int) -> "Graph":
        """The same model on microbatches of ``batch_size`` samples: FLOPs, outputs, tensors
        and the activation part of the memory traffic scale with the batch; parameters,
        and the weights an op reads (counted in ``touched_elems`` when it touches at least
        its parameters and its output), do not. Exact for the zoo's GPT and Llama graphs
        (every op is linear in the batch); BERT's embedding sum is off by 0.2 % of its
        own memory traffic."""
        if not isinstance(batch_size, int) or batch_size < 1:
            raise DistplanError(f"batch size must be a positive whole number, got {brief(batch_size)}")
        if batch_size != self.batch_size and self.measured:
            raise DistplanError(f"graph {self.name!r} carries measured times, which hold for its batch size "
                                f"{self.batch_size} only; measure the model at batch {batch_size} instead")
        s = batch_size / self.batch_size
        ops = []
        for op in self.ops:
            w = op.param_elems + op.tied_elems
            w = w if op.touched_elems >= w + op.out_elems else 0
            ops.append(dataclasses.replace(
                op, fwd_flops=op.fwd_flops * s, bwd_flops=op.bwd_flops * s, out_elems=round(op.out_elems * s),
                touched_elems=(op.touched_elems - w) * s + w,
                send_elems=None if op.send_elems is None else op.send_elems * s))
        tensors = tuple(dataclasses.replace(t, elems=round(t.elems * s)) for t in self.tensors)
        return dataclasses.replace(self, ops=tuple(ops), tensors=tensors, batch_size=batch_size)


#: the largest element count a graph may hold (int or float): what an int64 counts
MAX_ELEMS = 2**63
#: the largest FLOP count or measured time (seconds) of one operator: beyond any real
#: graph, and small enough that every cost computed from it stays finite (1.7e308
#: FLOPs or elements overflowed the costs to inf)
MAX_WORK = 1e30


def _plain_number(value: object, limit: float = MAX_ELEMS) -> bool:
    """A float or int in [0, ``limit``): what ``_check_number`` accepts, tested fast (a
    large graph checks millions of numbers)."""
    t = type(value)
    return (t is float or t is int) and 0 <= value < limit


def _check_number(value: float, what: str, limit: float = MAX_ELEMS) -> None:
    """A number in [0, ``limit``) (MAX_ELEMS for element counts, MAX_WORK for FLOPs and
    seconds), or a DistplanError naming ``what``."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise DistplanError(f"{what} must be a number, got {brief(value)}")
    if (isinstance(value, float) and not math.isfinite(value)) or value < 0:   # an int past 1e308: no float
        raise DistplanError(f"{what} must be finite and >= 0, got {brief(value)}")
    if value >= limit:
        most = "2**63 - 1" if limit == MAX_ELEMS else f"{limit:.0e}"
        raise DistplanError(f"{what} is {brief(value)}, beyond any real graph (at most {most})")


def _check_times(op: Operator) -> None:
    """``op.times``: (kind, precision, fwd_s, bwd_s) rows, one per kind and precision."""
    if not isinstance(op.times, tuple):
        raise DistplanError(f"operator {op.name!r}: times must be a tuple of (kind, precision, fwd_s, bwd_s)")
    seen: set[tuple[str, str]] = set()
    for row in op.times:
        if not (isinstance(row, tuple) and len(row) == 4 and isinstance(row[0], str) and row[0]
                and isinstance(row[1], str)):
            raise DistplanError(f"operator {op.name!r}: times row {brief(row)} is not (kind, precision, fwd_s, bwd_s)")
        kind, prec = row[0], row[1]
        if prec and prec not in PRECISION_NAMES:
            raise DistplanError(f"operator {op.name!r}, kind {kind!r}: precision {prec!r} unknown; use one of "
                                f"{', '.join(PRECISION_NAMES)}")
        if (kind, prec) in seen:
            raise DistplanError(f"operator {op.name!r}: two times rows for kind {kind!r}"
                                + (f" at {prec}" if prec else " (every precision)"))
        seen.add((kind, prec))
        where = f"operator {op.name!r}, kind {kind!r}" + (f", {prec}" if prec else "")
        if row[2] is None and row[3] is None:
            raise DistplanError(f"{where}: a times row needs fwd_s or bwd_s")
        for i, key in ((2, "fwd_s"), (3, "bwd_s")):
            if row[i] is not None:
                _check_number(row[i], f"{where}: {key}", MAX_WORK)


def _validate(g: Graph) -> None:
    if g.mode not in MODES:
        raise DistplanError(f"graph {g.name!r}: mode {g.mode!r} unknown; use one of {MODES}")
    if not g.ops:
        raise DistplanError(f"graph {g.name!r} has no operators")
    if not isinstance(g.batch_size, int) or g.batch_size < 1:
        raise DistplanError(f"graph {g.name!r}: batch_size must be a positive integer")
    names: set[str] = set()
    all_names: set[str] | None = None   # built at the first tied operator
    size = graph_size(len(g.ops), len(g.tensors))
    for i, op in enumerate(g.ops):
        if i % CLOCK_EVERY == 0:
            check_time(f"checking the operators of graph {g.name!r}", size)
        if not op.name or not isinstance(op.name, str):
            raise DistplanError(f"graph {g.name!r}: operator with empty or non-string name")
        if op.name in names:
            raise DistplanError(f"graph {g.name!r}: duplicate operator name {op.name!r}")
        names.add(op.name)
        if op.kind not in OP_KINDS:
            raise DistplanError(f"graph {g.name!r}: operator {op.name!r} has kind {brief(op.kind)}, unknown; use one "
                                f"of {', '.join(OP_KINDS)} ('other' for anything else)")
        for attr, limit in (("fwd_flops", MAX_WORK), ("bwd_flops", MAX_WORK), ("param_elems", MAX_ELEMS),
                            ("out_elems", MAX_ELEMS), ("touched_elems", MAX_ELEMS)):
            if not _plain_number(getattr(op, attr), limit):   # the message is formatted only for a bad one
                _check_number(getattr(op, attr), f"operator {op.name!r} {attr}", limit)
        if op.tied_to is not None and all_names is None:
            all_names = {o.name for o in g.ops if isinstance(o.name, str)}
        if op.tied_to is not None and (op.tied_to == op.name or op.tied_to not in all_names):
            raise DistplanError(f"graph {g.name!r}: operator {op.name!r} is tied to {op.tied_to!r}, "
                                "which is not another operator of the graph")
        if not _plain_number(op.tied_elems):
            _check_number(op.tied_elems, f"operator {op.name!r} tied_elems")
        if op.expert_param_elems:
            _check_number(op.expert_param_elems, f"operator {op.name!r} expert_param_elems", MAX_ELEMS)
            if op.expert_param_elems > op.param_elems:
                raise DistplanError(f"operator {op.name!r}: expert_param_elems {op.expert_param_elems} exceeds "
                                    f"param_elems {op.param_elems} (the experts are among its parameters)")
        if op.tp_role is not None and op.tp_role not in TP_ROLES:
            raise DistplanError(f"operator {op.name!r}: tp_role {brief(op.tp_role)} unknown; use one of "
                                f"{', '.join(TP_ROLES)} or leave it out")
        for attr in ("fwd_s", "bwd_s"):
            if getattr(op, attr) is not None:
                _check_number(getattr(op, attr), f"operator {op.name!r} {attr}", MAX_WORK)
        _check_times(op)
        if op.send_elems is not None:
            _check_number(op.send_elems, f"operator {op.name!r} send_elems")
            if op.send_elems > op.out_elems:
                raise DistplanError(f"operator {op.name!r}: send_elems {op.send_elems} exceeds out_elems "
                                    f"{op.out_elems} (an op sends at most what it writes)")
    seen: set[tuple[str, str]] = set()
    for i, t in enumerate(g.tensors):
        if i % CLOCK_EVERY == 0:
            check_time(f"checking the tensors of graph {g.name!r}", size)
        for end in (t.src, t.dst):
            if end not in names:
                raise DistplanError(
                    f"graph {g.name!r}: tensor {t.src!r}->{t.dst!r} names unknown operator {end!r}"
                )
        if t.src == t.dst:
            raise DistplanError(f"graph {g.name!r}: tensor {t.src!r}->{t.dst!r} is a self-loop")
        if (t.src, t.dst) in seen:
            raise DistplanError(f"graph {g.name!r}: duplicate tensor {t.src!r}->{t.dst!r}")
        seen.add((t.src, t.dst))
        if not _plain_number(t.elems):
            _check_number(t.elems, f"tensor {t.src!r}->{t.dst!r} elems")


def _topological_order(ops: tuple[Operator, ...], tensors: tuple[Tensor, ...], name: str) -> list[int]:
    """Kahn's algorithm; among ready operators the earliest given comes first."""
    pos = {op.name: i for i, op in enumerate(ops)}
    indeg = [0] * len(ops)
    succ: list[list[int]] = [[] for _ in ops]
    for t in tensors:
        succ[pos[t.src]].append(pos[t.dst])
        indeg[pos[t.dst]] += 1
    ready = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, j)
    if len(order) != len(ops):
        stuck = sorted(ops[i].name for i, d in enumerate(indeg) if d > 0)
        raise DistplanError(
            f"graph {name!r} has a cycle through {len(stuck)} operators "
            f"(e.g. {', '.join(stuck[:4])}); a computation graph must be acyclic"
        )
    return order


def unique_name(base: str, names: set[str]) -> str:
    """``base``, or ``base#2``, ``base#3``, ... : the first not in ``names``, which it joins."""
    out, k = base, 1
    while out in names:
        k += 1
        out = f"{base}#{k}"
    names.add(out)
    return out


def send_elems(out_elems: int, out_edge_elems: list[float]) -> float:
    """Elements of an op's outputs that other ops read: its output, or, when less, the sum
    over its out-edges (a fused op sends only the tensors that leave it)."""
    return float(min(float(out_elems), math.fsum(out_edge_elems))) if out_edge_elems else 0.0


def graph_send_elems(graph) -> list[float]:
    """Per operator of ``graph`` : its own ``send_elems`` when set,
    else ``send_elems`` over its out-tensors."""
    out: list[list[float]] = [[] for _ in graph.ops]
    for u, _, e in graph.edges():
        out[u].append(float(e))
    return [send_elems(op.out_elems, out[v]) if op.send_elems is None else float(op.send_elems)
            for v, op in enumerate(graph.ops)]


_LAYER = re.compile(r"^l(\d+)\.")


def layer_index(name: str) -> int | None:
    """The transformer layer an operator belongs to by the zoo's naming (``l<i>.…``),
    or None for operators outside the layers (embedding, head)."""
    m = _LAYER.match(name)
    return int(m.group(1)) if m else None
