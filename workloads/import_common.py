"""What the ONNX and torch.fx importers share: the state of a walk over a framework graph
(which op produced each value, which parameters each constant derives from, who owns
each parameter), the rules read off that state (parameter ownership and ties, the op
behind a chain of data movement, attention kinds), the unknown-operator warning, and the
final Graph assembly. A *value* is a tensor name (ONNX) or an fx node (torch); a
*parameter* is an initializer name (ONNX) or a parameter's ``id`` (torch).
"""
from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field

from distplan.core.errors import DistplanError
from distplan.workloads import op_costs as oc
from distplan.workloads.graph import MODES, Graph, Operator, Tensor


class UnknownOperatorWarning(UserWarning):
    """An operator type the importer has no cost rule for (imported with a pessimistic cost)."""


#: families that only move or view data
MOVES = frozenset({"move", "view"})
#: element-wise families between a softmax and the context product (NaN guards, masks, dropout scaling)
GUARDS = frozenset({"arith", "compare"})
#: families that may follow a model's head on the way to a graph output
HEAD_TAIL = frozenset({"move", "view", "relu", "gelu", "tanh", "transcendental", "silu", "softmax"})


def family_table(names_by_family: Mapping[str, str]) -> dict[str, str]:
    """{operator name: family} from {family: the operator names, space-separated}."""
    return {n: fam for fam, names in names_by_family.items() for n in names.split()}


def check_mode(mode: str) -> None:
    """Raise unless ``mode`` is a graph mode."""
    if mode not in MODES:
        raise DistplanError(f"mode {mode!r} unknown; use one of {MODES}")


@dataclass
class Walk:
    """What the walk over a framework graph's nodes has learned so far (per op: its
    family and its inputs, in op order)."""

    producer: dict[Hashable, int] = field(default_factory=dict)             # value -> op index
    origin: dict[Hashable, frozenset] = field(default_factory=dict)         # constant -> parameters
    param_elems: dict[Hashable, int] = field(default_factory=dict)          # parameter -> elements
    claimed: dict[Hashable, str] = field(default_factory=dict)              # parameter -> owner op
    copies: set[Hashable] = field(default_factory=set)                      # merged by value: each reader owns one
    family: list[str] = field(default_factory=list)                         # per op
    op_inputs: list[list[Hashable]] = field(default_factory=list)           # per op
    unknown: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))  # type -> op names

    def claim(self, params: Iterable[Hashable], name: str) -> tuple[int, dict[str, int]]:
        """(elements of the parameters op ``name`` is first to read, {owner op: elements}
        of the ones an earlier op owns: tied weights). A parameter listed twice (read
        through two inputs, e.g. ``W`` and ``Transpose(W)``) counts once. A parameter in
        ``copies`` (several equal-valued parameters the exporter merged into one
        initializer) is owned by every op that reads it, never tied."""
        n, tied = 0, defaultdict(int)
        for p in dict.fromkeys(params):
            if p in self.copies:
                n += self.param_elems[p]
            elif p not in self.claimed:
                self.claimed[p] = name
                n += self.param_elems[p]
            elif self.claimed[p] != name:
                tied[self.claimed[p]] += self.param_elems[p]
        return n, dict(tied)

    def producer_through(self, x: Hashable, limit: int = 8, through: frozenset[str] = MOVES) -> int | None:
        """The op that produced ``x``, looking back through up to ``limit`` ops of the
        families ``through`` (each followed along its first op-produced input)."""
        for _ in range(limit):
            v = self.producer.get(x)
            if v is None or self.family[v] not in through:
                return v
            x = next((y for y in self.op_inputs[v] if y in self.producer), None)
        return None

    def attn_kind(self, inputs: Iterable[Hashable]) -> str:
        """Activation x activation product: the context product if an operand comes from a
        softmax (possibly through data movement and element-wise guards such as the
        exporter's ``Where(IsNaN(p), 0, p)``), else the score product."""
        for x in inputs:
            v = self.producer_through(x, through=MOVES | GUARDS)
            if v is not None and self.family[v] == "softmax":
                return "attn_context"
        return "attn_score"

    def warn_unknown(self, source: str, noun: str, what: str, stacklevel: int) -> list[str]:
        """One UnknownOperatorWarning per unknown type (``stacklevel`` counted from the
        caller of this method); returns the messages (the Graph keeps them)."""
        out = []
        for kind, where in self.unknown.items():
            out.append(f"{source}: {len(where)} {noun} of unknown {what} {kind!r} (first: {where[0]!r}) "
                       f"imported with a pessimistic cost of {oc.UNKNOWN_FLOPS_PER_ELEM} FLOPs per touched element")
            warnings.warn(out[-1], UnknownOperatorWarning, stacklevel=stacklevel + 1)
        return out


def build_graph(name: str, ops: list[Operator], edges: Mapping[tuple[int, int], int], mode: str,
                batch_size: int, seq_len: int | None, import_warnings: Iterable[str] = ()) -> Graph:
    """The Graph of ``ops`` with one Tensor per (producer, consumer) pair of ``edges``
    (elements summed), keeping the importer's warnings."""
    tensors = tuple(Tensor(ops[u].name, ops[w].name, int(n)) for (u, w), n in edges.items())
    return Graph(name=name, ops=tuple(ops), tensors=tensors, mode=mode, batch_size=batch_size, seq_len=seq_len,
                 import_warnings=tuple(import_warnings))
